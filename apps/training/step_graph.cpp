// apps/training/step_graph.cpp — the CUDA-graph training step
// (apps/training/step_graph.h).
#include "apps/training/step_graph.h"

#include <map>

#include "engine/autograd.h"
#include "ops/ops.h"

namespace ember::apps {
namespace {

constexpr int64_t kArenaAlign = 64;  // elements: every gradient starts 128-byte aligned or better

int64_t aligned(int64_t n) { return (n + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

// The model's host-only one-element i64 buffers and their values now.
std::vector<std::pair<Tensor*, int64_t>> host_counters(net::Module& model) {
  std::vector<std::pair<Tensor*, int64_t>> out;
  for (auto& b : model.named_buffers())
    if (b.host_only && b.tensor->dtype() == DType::i64 && b.tensor->numel() == 1)
      out.emplace_back(b.tensor, b.tensor->data<int64_t>()[0]);
  return out;
}

}  // namespace

StepGraph::StepGraph(net::Module& model, net::SGD& opt, Device device) : model_(model), opt_(opt), device_(device) {
  EMBER_CHECK(!device.is_cpu(), "--cuda-graph 1 is for GPUs (add --gpus)");
  opt_.use_device_hyperparameters();
  seed_ = Tensor::full({1}, 1.0, DType::f32, device);
  build_arena();
}

void StepGraph::build_arena() {
  NoGradGuard no_grad;
  std::map<DType, int64_t> sizes;
  for (auto& p : model_.named_parameters())
    if (p.tensor->requires_grad()) sizes[p.tensor->dtype()] += aligned(p.tensor->numel());
  std::map<DType, Tensor> buffers;
  arena_.clear();
  for (auto& [dt, n] : sizes) {
    buffers[dt] = Tensor::zeros({n}, dt, device_);
    arena_.push_back(buffers[dt]);
  }
  std::map<DType, int64_t> offsets;
  for (auto& p : model_.named_parameters()) {
    Tensor& w = *p.tensor;
    if (!w.requires_grad()) {
      w.set_grad(Tensor());
      continue;
    }
    int64_t& at = offsets[w.dtype()];
    w.set_grad(buffers[w.dtype()].view_at(at, w.shape()).reinterpret_format(w.memory_format()));
    at += aligned(w.numel());
  }
}

void StepGraph::zero_grads() {
  for (Tensor& a : arena_) a.zero_();
}

void StepGraph::run(const std::function<void()>& step, const std::function<void()>& host_side) {
  if (!graph_ && eager_steps_ < kWarmupSteps) {
    step();
    ++eager_steps_;
    return;
  }
  if (!graph_) {
    const auto before = host_counters(model_);
    graph_ = capture_device_graph(device_, step);  // the host side of the step ran; its device work did not
    counter_steps_.clear();
    for (auto& [t, value] : before) counter_steps_.emplace_back(t, t->data<int64_t>()[0] - value);
    graph_->replay();
    return;
  }
  graph_->replay();
  ++replays_;
  for (auto& [t, added] : counter_steps_) t->data<int64_t>()[0] += added;
  opt_.count_replayed_step();
  host_side();
}

void StepGraph::reset() {
  graph_.reset();
  eager_steps_ = 0;
  build_arena();
}

}  // namespace ember::apps
