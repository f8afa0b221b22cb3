// cuda/nccl/nccl_communicator.cu — the NCCL communicator behind
// net/dist/nccl_comm.cpp (cuda/nccl/nccl_communicator.h).
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "cuda/cuda_check.h"
#include "cuda/nccl/nccl_communicator.h"

namespace ember::cuda {
namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_text(ncclResult_t r) { return ncclGetErrorString(r); }

#define NCCL_CHECK(call)                                                                                  \
  do {                                                                                                    \
    const ncclResult_t ember_nccl_status_ = (call);                                                       \
    if (ember_nccl_status_ != ncclSuccess && ember_nccl_status_ != ncclInProgress)                        \
      ::ember::fail(::ember::cat(#call, " failed: ", nccl_text(ember_nccl_status_)));                     \
  } while (0)

ncclDataType_t nccl_type(DType dt) {
  switch (dt) {
    case DType::f32: return ncclFloat32;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  fail("nccl: unknown dtype");
}

class Pending final : public NcclPending {
 public:
  Pending() {
    CUDA_CHECK(cudaEventCreate(&start_));
    CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~Pending() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void order_before(void* stream) override { CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), stop_, 0)); }
  bool done() override { return cudaEventQuery(stop_) == cudaSuccess; }
  double seconds() override {
    if (!done()) return 0;
    float ms = 0;
    return cudaEventElapsedTime(&ms, start_, stop_) == cudaSuccess ? ms * 1e-3 : 0;
  }
  double pending_seconds() override { return std::chrono::duration<double>(Clock::now() - queued_).count(); }
  cudaEvent_t start_, stop_;
  Clock::time_point queued_ = Clock::now();
};

}  // namespace

std::string nccl_unique_id() {
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof id.internal);
}

std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return cat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;  // the communication stream
  cudaEvent_t ready = nullptr;    // the compute stream's work so far
  int device = 0;
  double timeout_s = 0;
  bool aborted = false;
  std::mutex mu;  // NCCL calls on one communicator from one thread at a time

  // Non-blocking communicators return ncclInProgress: wait until the call has been issued.
  void settle(const char* what) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) fail(cat("NCCL ", what, ": ", nccl_text(state)));
      if (Clock::now() > deadline) {
        ncclCommAbort(comm);
        aborted = true;
        fail(cat("NCCL ", what, " did not complete within ", timeout_s,
                 " s (--comm-timeout): a rank never joined or stopped answering"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
};

NcclCommunicator::NcclCommunicator(int rank, int world, const std::string& unique_id, int device, double timeout_s)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(unique_id.size() == sizeof(ncclUniqueId), "nccl: the unique id has ", unique_id.size(), " bytes, not ",
              sizeof(ncclUniqueId));
  impl_->device = device;
  impl_->timeout_s = timeout_s;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&impl_->ready, cudaEventDisableTiming));
  ncclUniqueId id;
  std::memcpy(id.internal, unique_id.data(), sizeof id.internal);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  NCCL_CHECK(ncclCommInitRankConfig(&impl_->comm, world, id, rank, &config));
  impl_->settle("communicator set-up");
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_->comm) {
    if (impl_->aborted)
      ;  // ncclCommAbort freed it
    else if (cudaStreamQuery(impl_->stream) == cudaSuccess)
      ncclCommDestroy(impl_->comm);
    else
      ncclCommAbort(impl_->comm);
  }
  if (impl_->ready) cudaEventDestroy(impl_->ready);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

namespace {
// Queues one NCCL call on the communication stream after the compute stream's work, between timing events.
template <typename Call>
std::shared_ptr<NcclPending> queue_after(NcclCommunicator::Impl& m, void* compute_stream, const char* what, Call call) {
  std::lock_guard<std::mutex> lock(m.mu);
  EMBER_CHECK(!m.aborted, "nccl: the communicator was aborted");
  auto p = std::make_shared<Pending>();
  CUDA_CHECK(cudaEventRecord(m.ready, static_cast<cudaStream_t>(compute_stream)));
  CUDA_CHECK(cudaStreamWaitEvent(m.stream, m.ready, 0));
  CUDA_CHECK(cudaEventRecord(p->start_, m.stream));
  call();
  m.settle(what);
  CUDA_CHECK(cudaEventRecord(p->stop_, m.stream));
  return p;
}
}  // namespace

std::shared_ptr<NcclPending> NcclCommunicator::all_reduce(void* data, size_t count, DType dt, bool average,
                                                          void* compute_stream) {
  Impl& m = *impl_;
  return queue_after(m, compute_stream, "all_reduce", [&] {
    NCCL_CHECK(ncclAllReduce(data, data, count, nccl_type(dt), average ? ncclAvg : ncclSum, m.comm, m.stream));
  });
}

std::shared_ptr<NcclPending> NcclCommunicator::broadcast(void* data, size_t count, DType dt, int root,
                                                         void* compute_stream) {
  Impl& m = *impl_;
  return queue_after(m, compute_stream, "broadcast",
                     [&] { NCCL_CHECK(ncclBroadcast(data, data, count, nccl_type(dt), root, m.comm, m.stream)); });
}

std::string NcclCommunicator::async_error() {
  if (impl_->aborted) return "the communicator was aborted";
  ncclResult_t state = ncclSuccess;
  if (ncclCommGetAsyncError(impl_->comm, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
  return state == ncclSuccess || state == ncclInProgress ? "" : nccl_text(state);
}

void NcclCommunicator::abort() {
  if (impl_->aborted || !impl_->comm) return;
  impl_->aborted = true;
  ncclCommAbort(impl_->comm);
}

}  // namespace ember::cuda
