// engine/autograd.h — the define-by-run tape: Node, edges, backward, no-grad.
//
// Every differentiable op that runs while grad mode is on and has an input
// that requires grad records a Node: its name, one Edge per input (to the
// Node that produced it, or to the leaf that accumulates its .grad), and a
// backward function holding the tensors it saved. backward() orders the
// nodes reachable from the root topologically, runs them from the root down,
// sums (+=) gradients that meet at a node or leaf, and frees each node's
// saved tensors as soon as it has run.
//
// Saved tensors must be captured detached (Tensor::detach()), so that a node
// never owns the output that owns it.
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "engine/tensor.h"

namespace ember {

// Which inputs of a node need a gradient (bit i = input i).
struct GradMask {
  uint32_t bits = 0;
  bool operator[](size_t i) const { return (bits >> i) & 1u; }
};

using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output, GradMask needs)>;

struct Edge {
  std::shared_ptr<Node> node;        // input made by an op
  std::shared_ptr<TensorImpl> leaf;  // or input is a leaf that requires grad
  bool defined() const { return node || leaf; }
};

class Node {
 public:
  Node(const char* name, std::vector<Edge> edges, BackwardFn fn)
      : name_(name), edges_(std::move(edges)), fn_(std::move(fn)) {}
  const char* name() const { return name_; }
  const std::vector<Edge>& edges() const { return edges_; }
  // Runs the backward function once, then frees what it captured.
  std::vector<Tensor> apply(const Tensor& grad_output);

 private:
  const char* name_;
  std::vector<Edge> edges_;
  BackwardFn fn_;
  bool released_ = false;
};

// Grad mode: on by default, per thread.
bool grad_mode_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and any input requires grad: the op must record.
bool should_record(std::initializer_list<const Tensor*> inputs);

// Attaches a node to `output` whose backward is `fn`; `inputs` are the op's
// differentiable inputs in the order fn returns their gradients (undefined
// tensors allowed for optional inputs). Returns output.
Tensor record(const char* name, Tensor output, std::initializer_list<const Tensor*> inputs, BackwardFn fn);

// Back-propagates grad_output from root (what Tensor::backward calls).
void run_backward(const Tensor& root, const Tensor& grad_output);

// Accumulation used by backward; ops/ installs the kernel-backed version so
// that the engine stays independent of the kernels: y = a + b (new tensor),
// and acc += g in place; and the memory-format conversion of a seed given
// in the other format than its root (y.backward(g) with a contiguous g for
// a channels-last y, as PyTorch accepts any layout of g).
struct GradAccumulator {
  Tensor (*sum)(const Tensor& a, const Tensor& b) = nullptr;
  void (*add_into)(Tensor& acc, const Tensor& g) = nullptr;
  Tensor (*to_format)(const Tensor& t, MemoryFormat format) = nullptr;
};
void set_grad_accumulator(const GradAccumulator& acc);

}  // namespace ember
