// engine/autograd.cpp — recording nodes and running backward over them.
#include "engine/autograd.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace ember {
namespace {

thread_local bool t_grad_mode = true;
GradAccumulator g_acc;

const GradAccumulator& acc() {
  EMBER_CHECK(g_acc.sum && g_acc.add_into && g_acc.to_format,
              "autograd: no gradient accumulator installed (link ember's ops library)");
  return g_acc;
}

void check_same_layout(const Tensor& grad, const Tensor& like, const char* where) {
  EMBER_CHECK(grad.shape() == like.shape() && grad.dtype() == like.dtype() &&
                  grad.memory_format() == like.memory_format(),
              "autograd: ", where,
              " produced a gradient ", grad.str(), " for a tensor ", like.str());
}

}  // namespace

std::vector<Tensor> Node::apply(const Tensor& grad_output) {
  EMBER_CHECK(!released_, "autograd: backward through '", name_,
              "' a second time; its saved tensors were freed after the first backward");
  GradMask needs;
  for (size_t i = 0; i < edges_.size(); ++i)
    if (edges_[i].defined()) needs.bits |= 1u << i;
  std::vector<Tensor> grads = fn_(grad_output, needs);
  fn_ = nullptr;  // frees the saved tensors now
  released_ = true;
  EMBER_CHECK(grads.size() == edges_.size(), "autograd: '", name_, "' returned ", grads.size(),
              " gradients for ", edges_.size(), " inputs");
  return grads;
}

bool grad_mode_enabled() { return t_grad_mode; }
NoGradGuard::NoGradGuard() : previous_(t_grad_mode) { t_grad_mode = false; }
NoGradGuard::~NoGradGuard() { t_grad_mode = previous_; }

void set_grad_accumulator(const GradAccumulator& a) { g_acc = a; }

bool should_record(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_mode) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

Tensor record(const char* name, Tensor output, std::initializer_list<const Tensor*> inputs, BackwardFn fn) {
  EMBER_CHECK(inputs.size() <= 32, "autograd: a node has at most 32 inputs");
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* t : inputs) {
    Edge e;
    if (t && t->defined() && t->requires_grad()) {
      if (t->grad_fn())
        e.node = t->grad_fn();
      else
        e.leaf = t->impl_ptr();
    }
    edges.push_back(std::move(e));
  }
  output.get()->requires_grad = false;
  output.get()->grad_fn = std::make_shared<Node>(name, std::move(edges), std::move(fn));
  return output;
}

void run_backward(const Tensor& root, const Tensor& seed) {
  EMBER_CHECK(root.requires_grad(), "backward: the tensor does not require grad (no input of the ops that ",
              "made it requires grad, or it was made under NoGradGuard)");
  const bool convert = seed.defined() && seed.memory_format() != root.memory_format() && seed.shape() == root.shape() &&
                       seed.dtype() == root.dtype();
  const Tensor grad_output = convert ? acc().to_format(seed, root.memory_format()) : seed;
  check_same_layout(grad_output, root, "backward's seed");
  NoGradGuard no_grad;  // backward formulas are not themselves recorded

  // A leaf's first gradient is kept as it is when nothing else can see it (its
  // handle and its storage have no other owner: a fresh output of a backward
  // formula), else copied, since g may be shared with other paths. Keeping it
  // saves a copy per parameter and step (PyTorch's AccumulateGrad steals the
  // same way).
  auto accumulate_leaf = [](const std::shared_ptr<TensorImpl>& leaf, Tensor&& g) {
    Tensor target(leaf);
    check_same_layout(g, target, "a leaf's gradient");
    if (!leaf->grad) {
      const bool sole_owner = g.impl_ptr().use_count() == 1 && g.get()->storage.use_count() == 1 && !g.grad_fn();
      leaf->grad = sole_owner ? g.impl_ptr() : g.clone().impl_ptr();
    } else {
      Tensor existing(leaf->grad);
      acc().add_into(existing, g);
    }
  };

  auto leaf_done = [](const std::shared_ptr<TensorImpl>& leaf) {
    if (leaf->post_accumulate_grad_hook) leaf->post_accumulate_grad_hook(Tensor(leaf));
  };
  if (root.is_leaf()) {
    accumulate_leaf(root.impl_ptr(), Tensor(grad_output));
    leaf_done(root.impl_ptr());
    return;
  }

  // Topological order of the nodes reachable from the root: count how many
  // consumers each node has, then release a node once all have run.
  std::unordered_map<Node*, int> pending;
  std::unordered_map<TensorImpl*, int> leaf_pending;  // edges into each leaf still to run
  std::vector<Node*> stack{root.grad_fn().get()};
  std::unordered_set<Node*> seen{root.grad_fn().get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->edges()) {
      if (e.leaf) ++leaf_pending[e.leaf.get()];
      if (!e.node) continue;
      ++pending[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }

  std::unordered_map<Node*, Tensor> grads;
  grads[root.grad_fn().get()] = grad_output;
  std::vector<Node*> ready{root.grad_fn().get()};
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    Tensor g;
    if (auto it = grads.find(n); it != grads.end()) {
      g = std::move(it->second);
      grads.erase(it);
    }
    // A node that no gradient reached (every path to it was cut) is skipped,
    // but its inputs still count it as done.
    std::vector<Tensor> input_grads;
    if (g.defined()) input_grads = n->apply(g);
    g = Tensor();
    const auto& edges = n->edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      Tensor* gi = (i < input_grads.size() && input_grads[i].defined()) ? &input_grads[i] : nullptr;
      if (e.leaf) {
        if (gi) accumulate_leaf(e.leaf, std::move(*gi));
        if (--leaf_pending[e.leaf.get()] == 0) leaf_done(e.leaf);
        continue;
      }
      if (!e.node) continue;
      Node* next = e.node.get();
      if (gi) {
        auto it = grads.find(next);
        if (it == grads.end())
          grads.emplace(next, *gi);
        else
          it->second = acc().sum(it->second, *gi);
      }
      if (--pending[next] == 0) ready.push_back(next);
    }
  }
}

}  // namespace ember
