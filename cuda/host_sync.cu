// cuda/host_sync.cu — the counted waits and the deferred label checks (see
// host_sync.h).
#include "cuda/host_sync.h"

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/common.cuh"

namespace ember::cuda {
namespace {

std::atomic<int64_t> g_waits{0};

// One device's records: an array of kMaxRecords on the device, and the
// kernel name of each slot in use.
constexpr int kMaxRecords = 8;
struct DeviceRecords {
  BadLabelRecord* records = nullptr;
  std::vector<const char*> kernels;
  // A launch has asked for a record since the last read: only then can a
  // record have changed, so only then does a wait copy them back (a
  // checkpoint's hundreds of tensor reads copy them at most once).
  bool unread = false;
};

std::mutex g_mu;
std::map<int, DeviceRecords>& records_by_device() {
  static auto* m = new std::map<int, DeviceRecords>();  // never destroyed: the blocks outlive every stream
  return *m;
}

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

}  // namespace

void wait_for_stream(cudaStream_t s) {
  CUDA_CHECK(cudaStreamSynchronize(s));
  g_waits.fetch_add(1, std::memory_order_relaxed);
  count_device_work(DeviceWork::host_wait);
  throw_deferred_errors();
}

int64_t host_wait_count() { return g_waits.load(std::memory_order_relaxed); }

BadLabelRecord* bad_label_record(const char* kernel) {
  std::lock_guard<std::mutex> lock(g_mu);
  DeviceRecords& d = records_by_device()[current_device()];
  if (!d.records) {
    d.records = static_cast<BadLabelRecord*>(device_allocate(sizeof(BadLabelRecord) * kMaxRecords));
    CUDA_CHECK(cudaMemsetAsync(d.records, 0, sizeof(BadLabelRecord) * kMaxRecords, compute_stream()));
  }
  d.unread = true;
  for (size_t i = 0; i < d.kernels.size(); ++i)
    if (std::strcmp(d.kernels[i], kernel) == 0) return d.records + i;
  EMBER_CHECK(d.kernels.size() < size_t(kMaxRecords), "cuda: more than ", kMaxRecords,
              " kernels defer label checks (raise kMaxRecords in cuda/host_sync.cu)");
  d.kernels.push_back(kernel);
  return d.records + (d.kernels.size() - 1);
}

void throw_deferred_errors() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = records_by_device().find(current_device());
    if (it == records_by_device().end() || !it->second.unread) return;
    DeviceRecords& d = it->second;
    const size_t n = d.kernels.size();
    BadLabelRecord host[kMaxRecords];
    // (the stream is idle: this copy and its wait are part of the caller's wait, not counted again)
    CUDA_CHECK(cudaMemcpyAsync(host, d.records, sizeof(BadLabelRecord) * n, cudaMemcpyDeviceToHost, compute_stream()));
    CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
    for (size_t i = 0; i < n; ++i) {
      if (!host[i].found) continue;
      message = cat(d.kernels[i], ": label ", host[i].label, " of row ", host[i].row, " is outside [0, ",
                    host[i].classes, ") for ", host[i].classes, " classes");
      CUDA_CHECK(cudaMemsetAsync(d.records + i, 0, sizeof(BadLabelRecord), compute_stream()));
      break;
    }
    d.unread = !message.empty();  // another record may be set too: read again at the next wait
  }
  if (!message.empty()) fail(message);
}

}  // namespace ember::cuda
