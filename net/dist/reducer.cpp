// net/dist/reducer.cpp — gradient buckets averaged during backward (net/dist/reducer.h).
#include "net/dist/reducer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "engine/error.h"

namespace ember::net::dist {

Reducer::Reducer(Comm& comm, const std::vector<NamedParameter>& params, const ReducerOptions& o) : comm_(comm) {
  EMBER_CHECK(o.bucket_bytes > 0 && o.first_bucket_bytes > 0, "gradient buckets must have a positive size");
  // Reverse registration order, one open bucket per dtype.
  std::map<DType, int> open;
  std::vector<int> first_index;  // per bucket: the smallest parameter index (its last gradient to arrive)
  for (int i = int(params.size()) - 1; i >= 0; --i) {
    Tensor* t = params[size_t(i)].tensor;
    if (!t->requires_grad()) continue;  // frozen parameters are not reduced
    const DType dt = t->dtype();
    EMBER_CHECK(dt == DType::f32 || dt == DType::f64 || is_16bit_float(dt), "data-parallel: parameter '",
                params[size_t(i)].name, "' is ", t->str(), " (f32, f16, bf16 or f64 gradients only)");
    auto it = open.find(dt);
    const size_t bytes = size_t(t->numel()) * dtype_size(dt);
    if (it != open.end()) {
      Bucket& b = buckets_[size_t(it->second)];
      const bool first_of_dtype = std::none_of(buckets_.begin(), buckets_.begin() + it->second,
                                               [&](const Bucket& o2) { return o2.dtype == dt; });
      const size_t cap = first_of_dtype ? std::min(o.first_bucket_bytes, o.bucket_bytes) : o.bucket_bytes;
      if (b.device != t->device() || (b.numel > 0 && size_t(b.numel) * dtype_size(dt) + bytes > cap)) open.erase(it);
    }
    if (!open.count(dt)) {
      open[dt] = int(buckets_.size());
      Bucket b;
      b.dtype = dt;
      b.device = t->device();
      buckets_.push_back(std::move(b));
      first_index.push_back(i);
    }
    const int bi = open[dt];
    Bucket& b = buckets_[size_t(bi)];
    slots_.push_back(Slot{t, params[size_t(i)].name, bi, b.numel});
    b.numel += t->numel();
    first_index[size_t(bi)] = i;
  }
  // Number buckets by when they fill: the one whose earliest parameter comes last fills first.
  std::vector<int> order(buckets_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first_index[size_t(a)] > first_index[size_t(b)]; });
  std::vector<int> rank_of(order.size());
  std::vector<Bucket> sorted;
  for (size_t k = 0; k < order.size(); ++k) {
    rank_of[size_t(order[k])] = int(k);
    sorted.push_back(std::move(buckets_[size_t(order[k])]));
  }
  buckets_ = std::move(sorted);
  for (Slot& s : slots_) s.bucket = rank_of[size_t(s.bucket)];
  for (size_t i = 0; i < slots_.size(); ++i) buckets_[size_t(slots_[i].bucket)].slots.push_back(int(i));
  for (Bucket& b : buckets_) {
    b.flat = Tensor::zeros({b.numel}, b.dtype, b.device);
    if (comm.buffer_device() != b.device) b.host = Tensor::zeros({b.numel}, b.dtype, comm.buffer_device());
  }
  for (size_t i = 0; i < slots_.size(); ++i)
    slots_[i].param->set_post_accumulate_grad_hook([this, i](const Tensor&) { on_gradient(int(i)); });
}

Reducer::~Reducer() {
  for (Slot& s : slots_)
    if (s.param->defined() && s.param->is_leaf()) s.param->set_post_accumulate_grad_hook(nullptr);
  // Collectives still in flight hold their own reference to the buckets' storage.
}

std::string Reducer::describe() const {
  std::map<DType, std::string> sizes;
  for (const Bucket& b : buckets_) {
    std::string& s = sizes[b.dtype];
    char mib[32];
    std::snprintf(mib, sizeof mib, "%.2f", double(b.numel * int64_t(dtype_size(b.dtype))) / double(1 << 20));
    s += cat(s.empty() ? "" : ", ", mib);
  }
  std::string out = cat(buckets_.size(), " gradient buckets (");
  bool first = true;
  for (const auto& [dt, s] : sizes) out += cat(first ? "" : "; ", dtype_name(dt), ": ", s, " MiB"), first = false;
  return out + ")";
}

void Reducer::prepare() {
  for (Slot& s : slots_) s.ready = false;
  for (Bucket& b : buckets_) {
    b.pending = int(b.slots.size());
    b.launched = false;
    b.work.reset();
  }
  next_launch_ = 0;
  in_step_ = true;
}

void Reducer::on_gradient(int i) {
  if (!in_step_) return;  // a backward outside training steps (tests, tools): leave it alone
  Slot& s = slots_[size_t(i)];
  EMBER_CHECK(!s.ready, "data-parallel: the gradient of '", s.name,
              "' was finished twice in one step (one backward per step is supported)");
  Bucket& b = buckets_[size_t(s.bucket)];
  Tensor slice = b.flat.view_at(s.offset, s.param->shape()).reinterpret_format(s.param->memory_format());
  const Tensor g = s.param->grad();
  if (g.defined()) {
    slice.copy_from(g);
    s.param->set_grad(slice);
  } else {
    slice.zero_();
  }
  s.ready = true;
  if (--b.pending == 0) launch_ready();
}

void Reducer::launch(int bi) {
  Bucket& b = buckets_[size_t(bi)];
  const std::string what = cat("gradient bucket ", bi + 1, "/", buckets_.size());
  if (b.host.defined()) {
    b.host.copy_from(b.flat);
    b.work = comm_.all_reduce(b.host, ReduceOp::average, what);
  } else {
    b.work = comm_.all_reduce(b.flat, ReduceOp::average, what);
  }
  b.launched = true;
}

void Reducer::launch_ready() {
  while (next_launch_ < int(buckets_.size()) && buckets_[size_t(next_launch_)].pending == 0) launch(next_launch_++);
}

void Reducer::finish() {
  EMBER_CHECK(in_step_, "Reducer::finish without prepare");
  in_step_ = false;
  // Parameters backward never reached count as zero gradients.
  for (Slot& s : slots_) {
    if (s.ready) continue;
    Bucket& b = buckets_[size_t(s.bucket)];
    b.flat.view_at(s.offset, s.param->shape()).zero_();
    s.ready = true;
    --b.pending;
  }
  launch_ready();
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) {
    b.work->wait();
    stats_.comm_seconds += b.work->seconds();
    if (b.host.defined()) b.flat.copy_from(b.host);
  }
  stats_.exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.steps;
  for (Slot& s : slots_)
    if (!s.param->grad().defined())
      s.param->set_grad(buckets_[size_t(s.bucket)].flat.view_at(s.offset, s.param->shape())
                            .reinterpret_format(s.param->memory_format()));
}

}  // namespace ember::net::dist
