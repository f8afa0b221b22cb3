// apps/training/step_graph.h — a training step replayed as one CUDA graph
// (--cuda-graph 1), PyTorch's torch.cuda.graph recipe in ember's terms.
//
// A ResNet-50 step is ~430 launches; on a fast GPU, small models (ResNet-20
// on 28x28) spend more time launching than computing. Captured once, the
// step is one cudaGraphLaunch. What a replay needs, and how it gets it:
// - every address the step reads or writes stays the same: the batch is
//   copied into fixed input buffers before each replay (the caller's job),
//   the step's own allocations come from the graph's private pool
//   (cuda/allocator.h), and the gradients live in a persistent arena (one
//   flat buffer per dtype, zeroed in place by the step) instead of being
//   dropped and allocated anew, so the optimizer's multi-tensor plan never
//   changes;
// - values the host picks per step reach the device through memory, not
//   launch arguments: lr and momentum through the optimizer's device
//   hyperparameters (written before each step), the fp16 loss scale is on
//   the device already, the f32 backward's seed is a persistent 1;
// - what the step does on the host is redone after each replay: batch
//   norm's num_batches_tracked (the increment the captured step made), the
//   optimizer's step count, and the caller's own counters (`host_side`).
// The first kWarmupSteps steps run eagerly (cuDNN's algorithm choice, the
// optimizer's buffers, the plan); the next is captured and replayed, and
// every later one replays. Steps that differ (a smaller last batch) run
// eagerly with the same arena. Not for data-parallel runs, mixup/cutmix or
// dropout (their per-step host values are launch arguments); fit() checks.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "engine/device_graph.h"
#include "engine/tensor.h"
#include "net/module.h"
#include "net/sgd.h"

namespace ember::apps {

class StepGraph {
 public:
  static constexpr int kWarmupSteps = 1;

  // Gives the model's trainable parameters their gradients in the arena and
  // makes `opt` read lr and momentum from the device.
  StepGraph(net::Module& model, net::SGD& opt, Device device);

  // Zeroes every gradient in place: what a graph step calls instead of
  // opt.zero_grad() (one memset per dtype).
  void zero_grads();
  // f32 [1] = 1 on the device: the f32 backward's seed (loss.backward(seed)).
  const Tensor& unit_seed() const { return seed_; }

  // One step: `step` eagerly during the warm-up, then captured and
  // replayed; later calls replay it, then run `host_side`.
  void run(const std::function<void()>& step, const std::function<void()>& host_side);
  // Drops the graph and rebuilds the arena over the parameters that now
  // train (fine-tuning froze or unfroze some): warm-up and capture again.
  void reset();

  bool captured() const { return graph_ != nullptr; }
  int64_t replays() const { return replays_; }
  int64_t nodes() const { return graph_ ? graph_->nodes() : 0; }
  size_t pool_bytes() const { return graph_ ? graph_->pool_bytes() : 0; }

 private:
  void build_arena();

  net::Module& model_;
  net::SGD& opt_;
  Device device_;
  std::vector<Tensor> arena_;  // the gradients: one flat buffer per dtype
  Tensor seed_;
  std::unique_ptr<DeviceGraph> graph_;
  int eager_steps_ = 0;
  int64_t replays_ = 0;
  // The host-only counters of the model (batch norm's num_batches_tracked)
  // and what the captured step added to each.
  std::vector<std::pair<Tensor*, int64_t>> counter_steps_;
};

}  // namespace ember::apps
