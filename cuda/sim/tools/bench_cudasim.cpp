// cuda/sim/tools/bench_cudasim.cpp — how fast the CUDA emulator runs
// threads: emulated threads per second (median of 5 runs) for
//   (a) an empty kernel at 128, 256 and 1024 threads per block,
//   (b) a kernel with one __syncthreads,
//   (c) saxpy over 1M elements,
//   (d) a block reduction with warp shuffles (5 __shfl_xor_sync + 2 barriers),
//       with 256-thread blocks and with many 32-thread blocks.
// Built by `make build/bench_cudasim`; CUDASIM_SCHEDULE applies.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "cuda/common.cuh"

namespace {

__global__ void empty_kernel() {}

__global__ void one_barrier_kernel(int* out) {
  const unsigned t = threadIdx.x;
  __syncthreads();
  if (t == 0) out[blockIdx.x] = int(t);
}

__global__ void saxpy_kernel(float a, const float* x, float* y, int n) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x))
    y[i] = a * x[i] + y[i];
}

__global__ void block_reduce_kernel(const float* x, float* out, int n) {
  __shared__ float warp_sums[32];
  float v = 0;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) v += x[i];
  for (int m = 16; m > 0; m /= 2) v += __shfl_xor_sync(0xffffffffu, v, m);
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += warp_sums[w];
    out[blockIdx.x] = s;
  }
  __syncthreads();
}

// Median threads/s of 5 runs of f, which runs `threads` emulated threads.
double rate(double threads, const std::function<void()>& f) {
  f();  // warm up: fibers, stacks, symbol scan
  std::vector<double> r;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.push_back(threads / s);
  }
  std::sort(r.begin(), r.end());
  return r[2];
}

void report(const char* what, double threads_per_s) {
  std::printf("%-52s %8.2f M threads/s\n", what, threads_per_s / 1e6);
}

}  // namespace

int main() {
  using ember::cuda::launch;
  const char* sched = std::getenv("CUDASIM_SCHEDULE");
  std::printf("cudasim benchmark (schedule %s)\n", sched && *sched ? sched : "forward");
  for (unsigned threads : {128u, 256u, 1024u}) {
    const unsigned blocks = (1u << 20) / threads;
    char what[96];
    std::snprintf(what, sizeof what, "(a) empty kernel, %u threads/block", threads);
    report(what,
           rate(double(blocks) * threads, [&] { launch(empty_kernel, dim3(blocks), dim3(threads), 0, nullptr); }));
  }
  int* out = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&out), 4096 * sizeof(int));
  for (unsigned threads : {256u, 1024u}) {
    const unsigned blocks = (1u << 18) / threads;
    char what[96];
    std::snprintf(what, sizeof what, "(b) one __syncthreads, %u threads/block", threads);
    report(what, rate(double(blocks) * threads,
                      [&] { launch(one_barrier_kernel, dim3(blocks), dim3(threads), 0, nullptr, out); }));
  }
  const int n = 1 << 20;
  float *x = nullptr, *y = nullptr, *partial = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float));
  cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float));
  cudaMalloc(reinterpret_cast<void**>(&partial), 65536 * sizeof(float));
  cudaMemset(x, 0, n * sizeof(float));
  cudaMemset(y, 0, n * sizeof(float));
  report("(c) saxpy over 1M elements, 256 threads/block",
         rate(n, [&] { launch(saxpy_kernel, dim3(n / 256), dim3(256), 0, nullptr, 2.0f, x, y, n); }));
  report("(d) block reduction with shuffles, 256 threads/block", rate(n / 4, [&] {
           launch(block_reduce_kernel, dim3(n / 4 / 256), dim3(256), 0, nullptr, x, partial, n / 4);
         }));
  report("(d) block reduction with shuffles, 32 threads/block",
         rate(n / 4, [&] { launch(block_reduce_kernel, dim3(n / 4 / 32), dim3(32), 0, nullptr, x, partial, n / 4); }));
  const cudasim::Stats s = cudasim::stats();
  std::printf("fibers made: %llu (%zu KiB stack each)\n", static_cast<unsigned long long>(s.fibers),
              s.stack_bytes / 1024);
  cudaFree(x);
  cudaFree(y);
  cudaFree(partial);
  cudaFree(out);
  return 0;
}
