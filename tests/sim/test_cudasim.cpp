// tests/sim/test_cudasim.cpp — the CUDA emulator (cuda/sim) itself: that
// kernels written for nvcc run correctly on it, and that it catches the
// kernel bugs it promises to catch (divergent and missing barriers, exits
// before a barrier, warp operations with absent lanes, uninitialised shared
// memory, and under SANITIZE=1 out-of-bounds global and shared memory).
//
// Compiled like a .cu file for the emulator (-DEMBER_CUDASIM); the kernels
// are defined here and launched through ember::cuda::launch.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "tests/support/test_helpers.h"

using ember::cuda::launch;

namespace {

// ----------------------------------------------------------------- helpers
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)) == cudaSuccess);
  }
  explicit DeviceArray(const std::vector<T>& v) : DeviceArray(v.size()) { set(v); }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return p_; }
  void set(const std::vector<T>& v) {
    REQUIRE(v.size() == n_);
    REQUIRE(cudaMemcpy(p_, v.data(), n_ * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<T> host() const {
    std::vector<T> v(n_);
    REQUIRE(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

class ScheduleGuard {
 public:
  explicit ScheduleGuard(cudasim::Schedule s, uint64_t seed = 1)
      : old_(cudasim::schedule()), old_seed_(cudasim::schedule_seed()) {
    cudasim::set_schedule(s, seed);
  }
  ~ScheduleGuard() { cudasim::set_schedule(old_, old_seed_); }
  ScheduleGuard(const ScheduleGuard&) = delete;
  ScheduleGuard& operator=(const ScheduleGuard&) = delete;

 private:
  cudasim::Schedule old_;
  uint64_t old_seed_;
};

const cudasim::Schedule kAllSchedules[] = {cudasim::Schedule::forward, cudasim::Schedule::reverse,
                                           cudasim::Schedule::random};
const char* name_of(cudasim::Schedule s) {
  return s == cudasim::Schedule::forward ? "forward" : s == cudasim::Schedule::reverse ? "reverse" : "random";
}

// The message of the ember::Error a launch throws ("" if it does not).
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
std::string at_line(int line) { return "test_cudasim.cpp:" + std::to_string(line); }

// Lines of call sites, recorded by the kernels themselves (LINE_OF), so
// that the tests can check that failure reports name them.
int g_line[8];
#define LINE_OF(slot, call) (g_line[slot] = __LINE__, call)

// ------------------------------------------------------- index variables
__global__ void k_indices(unsigned* out, int* warp_size) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned* o = out + 12 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
  const unsigned v[12] = {threadIdx.x, threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z,
                          blockDim.x,  blockDim.y,  blockDim.z,  gridDim.x,  gridDim.y,  gridDim.z};
  for (int i = 0; i < 12; ++i) o[i] = v[i];
  if (block == 0 && thread == 0) *warp_size = warpSize;
}

TEST_CASE("cudasim: threadIdx, blockIdx, blockDim and gridDim over 3-D grids and blocks") {
  const dim3 grid(3, 2, 2), block(4, 3, 5);
  const unsigned n = 3 * 2 * 2 * 4 * 3 * 5;
  DeviceArray<unsigned> out(12 * n);
  DeviceArray<int> ws(1);
  launch(k_indices, grid, block, 0, nullptr, out.get(), ws.get());
  const std::vector<unsigned> o = out.host();
  unsigned bad = 0, i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 5; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++i) {
              const unsigned want[12] = {tx, ty, tz, bx, by, bz, 4, 3, 5, 3, 2, 2};
              bad += !std::equal(want, want + 12, o.begin() + 12 * i);
            }
  CHECK(bad == 0);
  CHECK(ws.host()[0] == 32);
}

// ---------------------------------------------------------- shared memory
// Each thread writes its slot, then reads its neighbour's: shared within a
// block; and each block sees only its own writes.
template <typename T>
__global__ void k_shared_neighbours(T* out) {
  __shared__ T buf[128];
  __shared__ int count;  // a second variable in the same template
  if (threadIdx.x == 0) count = 0;
  buf[threadIdx.x] = T(blockIdx.x * 1000 + threadIdx.x);
  __syncthreads();
  atomicAdd(&count, 1);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] =
      buf[(threadIdx.x + 1) % blockDim.x] + T(count == int(blockDim.x) ? 0 : 100000);
}

__global__ void k_shared_plain(int* out) {
  __shared__ int buf[64];
  buf[threadIdx.x] = int(blockIdx.x * 100 + threadIdx.x);
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// __shared__ in an inline (non-template) device function next to
// non-template kernels in the same file: g++ would call a named section
// shared by both a "section type conflict".
__device__ __forceinline__ float block_sum_inline(float v) {
  __shared__ float partial[64];
  partial[threadIdx.x] = v;
  __syncthreads();
  float s = 0;
  for (unsigned i = 0; i < blockDim.x; ++i) s += partial[i];
  __syncthreads();
  return s;
}
__global__ void k_inline_shared(float* out) { out[threadIdx.x] = block_sum_inline(float(threadIdx.x)); }

template <typename T>
void check_shared_neighbours() {
  const unsigned blocks = 3, threads = 128;
  DeviceArray<T> out(blocks * threads);
  launch(k_shared_neighbours<T>, dim3(blocks), dim3(threads), 0, nullptr, out.get());
  const std::vector<T> o = out.host();
  unsigned bad = 0;
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) bad += o[b * threads + t] != T(b * 1000 + (t + 1) % threads);
  CHECK(bad == 0);
}

TEST_CASE("cudasim: __shared__ is shared within a block and separate per block, in templates too") {
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s);
    check_shared_neighbours<float>();
    check_shared_neighbours<double>();
    check_shared_neighbours<int>();

    DeviceArray<int> out(4 * 64);
    launch(k_shared_plain, dim3(4), dim3(64), 0, nullptr, out.get());
    const std::vector<int> o = out.host();
    unsigned bad = 0;
    for (int b = 0; b < 4; ++b)
      for (int t = 0; t < 64; ++t) bad += o[b * 64 + t] != b * 100 + 63 - t;
    CHECK(bad == 0);

    DeviceArray<float> sums(64);
    launch(k_inline_shared, dim3(1), dim3(64), 0, nullptr, sums.get());
    const std::vector<float> sv = sums.host();
    CHECK(std::count(sv.begin(), sv.end(), 63.0f * 64.0f / 2.0f) == 64);
  }
}

// --------------------------------------------------------------- reduction
template <typename T>
__global__ void k_block_sum(const T* x, T* partial, int n) {
  __shared__ T buf[256];
  const unsigned t = threadIdx.x;
  T v = 0;
  for (int i = int(blockIdx.x * blockDim.x + t); i < n; i += int(gridDim.x * blockDim.x)) v += x[i];
  buf[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
    if (t < s) buf[t] += buf[t + s];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = buf[0];
}

TEST_CASE("cudasim: a block reduction with __syncthreads is right in every schedule") {
  const int n = 5000;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = double(i % 97) - 40.0;
  double want = 0;
  for (double v : x) want += v;
  DeviceArray<double> dx(x);
  DeviceArray<double> partial(7);
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s, 42);
    launch(k_block_sum<double>, dim3(7), dim3(256), 0, nullptr, dx.get(), partial.get(), n);
    double got = 0;
    for (double v : partial.host()) got += v;
    CHECK(got == want);
  }
}

// ------------------------------------------- barriers with a predicate
__global__ void k_sync_predicates(int* out) {
  const int t = int(threadIdx.x);
  out[4 * t + 0] = __syncthreads_count(t % 3 == 0);
  out[4 * t + 1] = __syncthreads_and(t < 1000);
  out[4 * t + 2] = __syncthreads_and(t != 17);
  out[4 * t + 3] = __syncthreads_or(t == 99) * 2 + __syncthreads_or(0);
}

TEST_CASE("cudasim: __syncthreads_count, _and and _or") {
  const int n = 100;
  DeviceArray<int> out(4 * n);
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s);
    launch(k_sync_predicates, dim3(2), dim3(n), 0, nullptr, out.get());
    const std::vector<int> o = out.host();
    unsigned bad = 0;
    for (int t = 0; t < n; ++t) bad += o[4 * t] != 34 || o[4 * t + 1] != 1 || o[4 * t + 2] != 0 || o[4 * t + 3] != 2;
    CHECK(bad == 0);
  }
}

// ----------------------------------------------------------------- shuffles
template <typename T>
__global__ void k_shuffles(const T* in, T* out, int width, unsigned delta, int src, int lane_mask) {
  const unsigned t = threadIdx.x;
  const T v = in[t];
  out[4 * t + 0] = __shfl_sync(0xffffffffu, v, src, width);
  out[4 * t + 1] = __shfl_up_sync(0xffffffffu, v, delta, width);
  out[4 * t + 2] = __shfl_down_sync(0xffffffffu, v, delta, width);
  out[4 * t + 3] = __shfl_xor_sync(0xffffffffu, v, lane_mask, width);
}

// The source lane of each shuffle as CUDA's programming guide describes it
// (not as the emulator computes it): -1 means "the caller's own value".
int ref_idx(int lane, int src, int width) { return lane / width * width + (src & (width - 1)); }
int ref_up(int lane, int delta, int width) { return lane - delta >= lane / width * width ? lane - delta : lane; }
int ref_down(int lane, int delta, int width) { return lane + delta < (lane / width + 1) * width ? lane + delta : lane; }
int ref_xor(int lane, int mask, int width) {  // earlier groups may be read, later ones not
  const int j = lane ^ mask;
  return j < (lane / width + 1) * width ? j : lane;
}

template <typename T>
void check_shuffles() {
  const int n = 64;  // two warps
  std::vector<T> in(n);
  for (int i = 0; i < n; ++i) in[i] = T(3 * i + 1);
  DeviceArray<T> din(in);
  DeviceArray<T> out(4 * n);
  unsigned bad = 0, cases = 0;
  for (int width : {1, 2, 4, 8, 16, 32})
    for (int delta : {0, 1, 3, 8})
      for (int src : {0, 5, -1, 33})
        for (int lane_mask : {1, 3, 8, 16, 31}) {
          launch(k_shuffles<T>, dim3(1), dim3(n), 0, nullptr, din.get(), out.get(), width, unsigned(delta), src,
                 lane_mask);
          const std::vector<T> o = out.host();
          for (int t = 0; t < n; ++t) {
            const int warp = t / 32 * 32, lane = t % 32;
            const int want[4] = {ref_idx(lane, src, width), ref_up(lane, delta, width), ref_down(lane, delta, width),
                                 ref_xor(lane, lane_mask, width)};
            for (int k = 0; k < 4; ++k) {
              ++cases;
              bad += double(o[4 * t + k]) != double(in[warp + want[k]]);
            }
          }
        }
  CHECK(cases == 6 * 4 * 4 * 5 * 64 * 4);
  CHECK(bad == 0);
}

TEST_CASE("cudasim: shuffles of every type, with width < 32 and CUDA's out-of-range rule") {
  check_shuffles<int>();
  check_shuffles<unsigned>();
  check_shuffles<long long>();
  check_shuffles<unsigned long long>();
  check_shuffles<float>();
  check_shuffles<double>();
}

__global__ void k_half_shuffle(const __half* in, float* out) {
  const __half v = in[threadIdx.x];
  out[2 * threadIdx.x] = __half2float(__shfl_down_sync(0xffffffffu, v, 2, 8));
  out[2 * threadIdx.x + 1] = __half2float(__shfl_xor_sync(0xffffffffu, v, 5));
}

TEST_CASE("cudasim: __half shuffles") {
  std::vector<__half> in(32);
  for (int i = 0; i < 32; ++i) in[i] = __float2half(float(i) + 0.5f);
  DeviceArray<__half> din(in);
  DeviceArray<float> out(64);
  launch(k_half_shuffle, dim3(1), dim3(32), 0, nullptr, din.get(), out.get());
  const std::vector<float> o = out.host();
  unsigned bad = 0;
  for (int l = 0; l < 32; ++l)
    bad += o[2 * l] != float(ref_down(l, 2, 8)) + 0.5f || o[2 * l + 1] != float(l ^ 5) + 0.5f;
  CHECK(bad == 0);
}

// Lanes 0..15 shuffle among themselves (mask 0xffff); lanes 8..15 read
// lanes 16..23, which are not in the mask: undefined on a GPU, all-ones
// bits (-1) on the emulator.
__global__ void k_partial_shuffle(int* out) {
  const int lane = int(threadIdx.x);
  out[lane] = lane < 16 ? __shfl_down_sync(0x0000ffffu, lane * 10, 8) : -2;
}

TEST_CASE("cudasim: a shuffle reading a lane outside its mask gives all-ones bits") {
  DeviceArray<int> out(32);
  launch(k_partial_shuffle, dim3(1), dim3(32), 0, nullptr, out.get());
  const std::vector<int> o = out.host();
  for (int l = 0; l < 8; ++l) CHECK(o[l] == (l + 8) * 10);
  for (int l = 8; l < 16; ++l) CHECK(o[l] == -1);
  for (int l = 16; l < 32; ++l) CHECK(o[l] == -2);
}

// --------------------------------------------------------- votes and match
__global__ void k_votes(unsigned* out) {
  const unsigned t = threadIdx.x, lane = t % 32;
  unsigned* o = out + 8 * t;
  const unsigned mask = 0x0f0f0f0fu;  // only these lanes take part
  if (mask >> lane & 1) {
    o[0] = __ballot_sync(mask, lane % 3 == 0);
    o[1] = unsigned(__any_sync(mask, lane == 9)) + 2 * unsigned(__any_sync(mask, lane == 13));
    o[2] = unsigned(__any_sync(mask, lane == 4 && t >= 1000));
    o[3] = unsigned(__all_sync(mask, lane != 12));
    o[4] = unsigned(__all_sync(mask, lane < 32));
  }
  o[5] = __ballot_sync(0xffffffffu, 1);  // the last warp of 80 threads has 16 lanes
  o[6] = __activemask();
  o[7] = __match_any_sync(0xffffffffu, int(lane / 4)) + __reduce_add_sync(0xffffffffu, 1u);
}

TEST_CASE("cudasim: ballot, any, all, activemask and match with partial masks and a partial warp") {
  const unsigned n = 80;
  DeviceArray<unsigned> out(8 * n);
  launch(k_votes, dim3(1), dim3(n), 0, nullptr, out.get());
  const std::vector<unsigned> o = out.host();
  unsigned ballot = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((0x0f0f0f0fu >> l & 1) && l % 3 == 0) ballot |= 1u << l;
  for (unsigned t = 0; t < n; ++t) {
    CAPTURE(t);
    const unsigned lane = t % 32, exist = t < 64 ? 0xffffffffu : 0xffffu;  // lanes past the block do not take part
    if (0x0f0f0f0fu >> lane & 1) {
      CHECK(o[8 * t] == (ballot & exist));
      CHECK(o[8 * t + 1] == 1);  // lane 9 is in the mask, lane 13 is not
      CHECK(o[8 * t + 2] == 0);
      CHECK(o[8 * t + 3] == 1);  // lane 12 is not in the mask either
      CHECK(o[8 * t + 4] == 1);
    }
    CHECK(o[8 * t + 5] == exist);
    CHECK(o[8 * t + 6] == exist);
    CHECK(o[8 * t + 7] == ((0xfu << (lane / 4 * 4)) & exist) + unsigned(__builtin_popcount(exist)));
  }
}

// ------------------------------------------------------------------ atomics
struct AtomicOut {
  int* hist;
  unsigned* hist_u;
  unsigned long long* hist_ull;
  float* fsum;
  double* dsum;
  __half* hsum;
  int* imax;
  int* imin;
  unsigned* umax;
  unsigned* umin;
  unsigned long long* ullmax;
  unsigned long long* ullmin;
  long long* llmax;
  long long* llmin;
  int* cas_i;
  unsigned* cas_u;
  unsigned long long* cas_ull;
  int* exch_i;
  unsigned* exch_u;
  unsigned long long* exch_ull;
  float* exch_f;
  int* bits;
};

__global__ void k_atomics(const int* keys, int n, AtomicOut o) {
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += int(gridDim.x * blockDim.x)) {
    const int k = keys[i];
    atomicAdd(&o.hist[k], 1);
    atomicAdd(&o.hist_u[k], 2u);
    atomicAdd(&o.hist_ull[k], 3ull);
    atomicAdd(o.fsum, 1.0f);
    atomicAdd(o.dsum, 0.5);
    atomicAdd(o.hsum, __float2half(1.0f));
    atomicMax(o.imax, i - 500);
    atomicMin(o.imin, i - 500);
    atomicMax(o.umax, unsigned(i));
    atomicMin(o.umin, unsigned(i) + 7u);
    atomicMax(o.ullmax, 1ull << 40 | unsigned(i));
    atomicMin(o.ullmin, 1ull << 40 | unsigned(i));
    atomicMax(o.llmax, -(1ll << 40) + i);
    atomicMin(o.llmin, -(1ll << 40) - i);
    int old = *o.cas_i, seen;  // increments by compare-and-swap loops
    while ((seen = atomicCAS(o.cas_i, old, old + 1)) != old) old = seen;
    unsigned uold = *o.cas_u, useen;
    while ((useen = atomicCAS(o.cas_u, uold, uold + 2)) != uold) uold = useen;
    unsigned long long lold = *o.cas_ull, lseen;
    while ((lseen = atomicCAS(o.cas_ull, lold, lold + 3)) != lold) lold = lseen;
    atomicExch(o.exch_i, i);
    atomicExch(o.exch_u, unsigned(i));
    atomicExch(o.exch_ull, 1ull << 33);
    atomicExch(o.exch_f, 2.5f);
    atomicOr(&o.bits[0], 1 << (i % 31));
    atomicXor(&o.bits[1], 1);
    atomicAnd(&o.bits[2], ~(1 << (i % 31)));
    atomicSub(&o.bits[3], 1);
  }
}

TEST_CASE("cudasim: atomics of every type, with contention across blocks") {
  const int n = 4000, bins = 16;
  std::vector<int> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = (i * 7 + i / 13) % bins;
  DeviceArray<int> dkeys(keys), hist(bins), ii(2), cas_i(1), exch_i(1), bits(4);
  DeviceArray<unsigned> hist_u(bins), uu(2), cas_u(1), exch_u(1);
  DeviceArray<unsigned long long> hist_ull(bins), ull(2), cas_ull(1), exch_ull(1);
  DeviceArray<long long> ll(2);
  DeviceArray<float> fsum(1), exch_f(1);
  DeviceArray<double> dsum(1);
  DeviceArray<__half> hsum(1);
  hist.set(std::vector<int>(bins, 0));
  hist_u.set(std::vector<unsigned>(bins, 0));
  hist_ull.set(std::vector<unsigned long long>(bins, 0));
  ii.set({-1000000, 1000000});
  uu.set({0u, 0xffffffffu});
  ull.set({0ull, ~0ull});
  ll.set({-(1ll << 50), 0});
  cas_i.set({0});
  cas_u.set({0});
  cas_ull.set({0});
  exch_i.set({-1});
  exch_u.set({0});
  exch_ull.set({0});
  exch_f.set({0});
  bits.set({0, 0, -1, 0});
  fsum.set({0});
  dsum.set({0});
  hsum.set({__float2half(0.0f)});
  AtomicOut o{hist.get(),   hist_u.get(),   hist_ull.get(), fsum.get(),   dsum.get(),    hsum.get(),
              ii.get(),     ii.get() + 1,   uu.get(),       uu.get() + 1, ull.get(),     ull.get() + 1,
              ll.get(),     ll.get() + 1,   cas_i.get(),    cas_u.get(),  cas_ull.get(), exch_i.get(),
              exch_u.get(), exch_ull.get(), exch_f.get(),   bits.get()};
  launch(k_atomics, dim3(5), dim3(128), 0, nullptr, dkeys.get(), n, o);
  std::vector<int> want(bins, 0);
  for (int k : keys) ++want[k];
  const std::vector<int> h = hist.host();
  const std::vector<unsigned> hu = hist_u.host();
  const std::vector<unsigned long long> hull = hist_ull.host();
  for (int b = 0; b < bins; ++b) {
    CHECK(h[b] == want[b]);
    CHECK(hu[b] == 2u * unsigned(want[b]));
    CHECK(hull[b] == 3ull * unsigned(want[b]));
  }
  CHECK(fsum.host()[0] == float(n));
  CHECK(dsum.host()[0] == 0.5 * n);
  CHECK(__half2float(hsum.host()[0]) == 2048.0f);  // 4000 additions of 1 saturate at 2048 in fp16
  CHECK(ii.host() == std::vector<int>{n - 1 - 500, -500});
  CHECK(uu.host() == std::vector<unsigned>{unsigned(n - 1), 7u});
  CHECK(ull.host() == std::vector<unsigned long long>{1ull << 40 | unsigned(n - 1), 1ull << 40});
  CHECK(ll.host() == std::vector<long long>{-(1ll << 40) + n - 1, -(1ll << 40) - (n - 1)});
  CHECK(cas_i.host()[0] == n);
  CHECK(cas_u.host()[0] == 2u * n);
  CHECK(cas_ull.host()[0] == 3ull * n);
  CHECK(exch_i.host()[0] >= 0);
  CHECK(exch_ull.host()[0] == 1ull << 33);
  CHECK(exch_f.host()[0] == 2.5f);
  CHECK(bits.host() == std::vector<int>{0x7fffffff, 0, -1 & ~0x7fffffff, -n});
}

__global__ void k_half_sum(__half* sum, int n) {
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) atomicAdd(sum, __float2half(0.25f));
}

TEST_CASE("cudasim: atomicAdd on __half rounds like fp16") {
  DeviceArray<__half> sum(1);
  sum.set({__float2half(0.0f)});
  launch(k_half_sum, dim3(1), dim3(64), 0, nullptr, sum.get(), 1000);
  CHECK(__half2float(sum.host()[0]) == 250.0f);
}

// ---------------------------------------------------- dynamic shared memory
__global__ void k_reverse_dynamic(const float* x, float* y) {
  EMBER_DYNAMIC_SHARED(float, s);
  const unsigned t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
  s[t] = x[i];
  __syncthreads();
  y[i] = s[blockDim.x - 1 - t];
}

__global__ void k_touch_dynamic(int* ran, int bytes) {
  EMBER_DYNAMIC_SHARED(unsigned char, s);
  s[threadIdx.x % bytes] = 1;
  *ran = 1;
}

TEST_CASE("cudasim: dynamic shared memory, and the 48 KiB limit raised by cudaFuncSetAttribute") {
  const int blocks = 3, threads = 96;
  std::vector<float> x(blocks * threads);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  DeviceArray<float> dx(x), dy(x.size());
  launch(k_reverse_dynamic, dim3(blocks), dim3(threads), threads * sizeof(float), nullptr, dx.get(), dy.get());
  const std::vector<float> y = dy.host();
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) CHECK(y[b * threads + t] == x[b * threads + threads - 1 - t]);

  DeviceArray<int> ran(1);
  ran.set({0});
  const size_t big = 100 * 1024;
  cudaGetLastError();
  cudasim::launch(k_touch_dynamic, dim3(1), dim3(32), big, nullptr, ran.get(), int(big));
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(contains(cudaGetErrorString(cudaErrorInvalidValue), "cudaFuncAttributeMaxDynamicSharedMemorySize"));
  CHECK(ran.host()[0] == 0);
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k_touch_dynamic),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(big)) == cudaSuccess);
  launch(k_touch_dynamic, dim3(1), dim3(32), big, nullptr, ran.get(), int(big));
  CHECK(ran.host()[0] == 1);
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k_touch_dynamic),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024) == cudaErrorInvalidValue);
  cudaGetLastError();
}

// ------------------------------------------------------------ runtime calls
TEST_CASE("cudasim: cudaMemcpy and cudaMemset check which side each pointer is on") {
  DeviceArray<int> d(16);
  std::vector<int> h(16, 7), h2(16, 0);
  int* dp = d.get();
  cudaGetLastError();
  CHECK(cudaMemcpy(dp, h.data(), 64, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(dp + 8, dp, 32, cudaMemcpyDeviceToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(h2.data(), dp, 64, cudaMemcpyDefault) == cudaSuccess);
  CHECK(h2 == h);

  // destination of a HostToDevice copy not on the device
  CHECK(cudaMemcpy(h2.data(), h.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaPeekAtLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(contains(cudaGetErrorString(cudaErrorInvalidValue), "destination"));
  CHECK(contains(cudaGetErrorString(cudaErrorInvalidValue), "not device memory"));
  // source of a HostToDevice copy on the device
  CHECK(cudaMemcpy(dp, dp + 4, 16, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(contains(cudaGetErrorString(cudaErrorInvalidValue), "source"));
  CHECK(contains(cudaGetErrorString(cudaErrorInvalidValue), "is device memory"));
  // DeviceToHost from host memory, and running past the end of a block
  CHECK(cudaMemcpy(h2.data(), h.data(), 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(h2.data(), dp + 4, 64, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(contains(cudaGetErrorString(cudaErrorInvalidValue),
                 "runs 16 bytes past the end of the 64-byte cudaMalloc block"));
  CHECK(cudaMemcpyAsync(dp, h.data(), 68, cudaMemcpyHostToDevice, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(dp, h.data(), 4, cudaMemcpyKind(7)) == cudaErrorInvalidMemcpyDirection);
  // memset
  CHECK(cudaMemset(dp, 0, 64) == cudaSuccess);
  CHECK(cudaMemsetAsync(h2.data(), 0, 4, nullptr) == cudaErrorInvalidValue);
  CHECK(cudaMemset(dp + 15, 0, 8) == cudaErrorInvalidValue);
  // frees
  CHECK(cudaFree(h2.data()) == cudaErrorInvalidValue);
  CHECK(cudaFree(dp + 1) == cudaErrorInvalidValue);
  CHECK(cudaFree(nullptr) == cudaSuccess);
  // pinned memory is host memory
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 64) == cudaSuccess);
  CHECK(cudaMemcpy(pinned, dp, 64, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(cudaMemcpy(pinned, h.data(), 64, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  cudaPointerAttributes a;
  CHECK(cudaPointerGetAttributes(&a, dp + 3) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeDevice);
  CHECK(cudaPointerGetAttributes(&a, pinned) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeHost);
  CHECK(cudaPointerGetAttributes(&a, h.data()) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeUnregistered);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  CHECK(reinterpret_cast<uintptr_t>(dp) % 256 == 0);
  cudaGetLastError();
}

TEST_CASE("cudasim: device, stream and event calls") {
  int n = 0, dev = -1, v = 0;
  CHECK(cudaGetDeviceCount(&n) == cudaSuccess);
  CHECK(n == 1);
  CHECK(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaGetDevice(&dev) == cudaSuccess);
  CHECK(dev == 0);
  CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name) == "cudasim (CPU emulator)");
  CHECK(prop.warpSize == 32);
  CHECK(prop.maxThreadsPerBlock == 1024);
  CHECK(prop.sharedMemPerBlock == 48 * 1024);
  CHECK(prop.sharedMemPerBlockOptin == 227 * 1024);
  CHECK(prop.major == 9);
  CHECK(prop.minor == 0);
  CHECK(prop.maxGridSize[1] == 65535);
  CHECK(prop.totalGlobalMem > 0);
  CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess);
  CHECK(v == prop.multiProcessorCount);
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
  CHECK(total_b >= free_b);

  cudaStream_t s;
  cudaEvent_t e0, e1;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaEventCreate(&e0) == cudaSuccess);
  CHECK(cudaEventCreateWithFlags(&e1, cudaEventDefault) == cudaSuccess);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaErrorInvalidResourceHandle);  // not recorded
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);                 // or the next launch() would report it
  CHECK(cudaEventRecord(e0, s) == cudaSuccess);
  DeviceArray<double> x(std::vector<double>(1000, 1.0)), p(4);
  launch(k_block_sum<double>, dim3(4), dim3(256), 0, s, x.get(), p.get(), 1000);
  CHECK(cudaEventRecord(e1, s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(cudaEventSynchronize(e1) == cudaSuccess);
  CHECK(cudaEventQuery(e1) == cudaSuccess);
  CHECK(cudaStreamQuery(s) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess);
  CHECK(ms >= 0.0f);
  CHECK(cudaEventDestroy(e0) == cudaSuccess);
  CHECK(cudaEventDestroy(e1) == cudaSuccess);
  CHECK(cudaStreamDestroy(s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaErrorInvalidResourceHandle);
  CHECK(contains(ember::testing::thrown_message([&] { launch(k_block_sum<double>, dim3(4), dim3(256), 0, s, x.get(), p.get(), 1000); }),
                 "stream"));
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(std::string(cudaGetErrorName(cudaErrorLaunchFailure)) == "cudaErrorLaunchFailure");
  cudaGetLastError();
}

// ------------------------------------------------------------ launch limits
__global__ void k_mark(int* ran) { *ran = 1; }

TEST_CASE("cudasim: launch limits are errors and the kernel does not run") {
  DeviceArray<int> ran(1);
  ran.set({0});
  struct Case {
    dim3 grid, block;
    size_t smem;
    cudaError_t want;
  };
  const Case cases[] = {
      {dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(2048), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(32, 32, 2), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration},
      {dim3(1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
      {dim3(1, 1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
      {dim3(2147483648u), dim3(32), 0, cudaErrorInvalidConfiguration},
      {dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(0), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(32), 48 * 1024 + 1, cudaErrorInvalidValue},
  };
  cudaGetLastError();
  for (const Case& c : cases) {
    CAPTURE(c.block.x);
    cudasim::launch(k_mark, c.grid, c.block, c.smem, nullptr, ran.get());
    CHECK(cudaPeekAtLastError() == c.want);
    CHECK(cudaGetLastError() == c.want);
    CHECK(ran.host()[0] == 0);
  }
  const std::string m = ember::testing::thrown_message([&] { launch(k_mark, dim3(1), dim3(1025), 0, nullptr, ran.get()); });
  CHECK(contains(m, "1025 threads per block"));
  CHECK(ran.host()[0] == 0);
  launch(k_mark, dim3(1), dim3(1024), 48 * 1024, nullptr, ran.get());  // the limits themselves are fine
  CHECK(ran.host()[0] == 1);
}

// ----------------------------------------------------- failures it reports
__global__ void k_divergent(int* out) {
  if (threadIdx.x < 37) {
    out[threadIdx.x] = 1;
    LINE_OF(0, __syncthreads());
  } else {
    LINE_OF(1, __syncthreads());
  }
}

__global__ void k_fine(int* out) {
  out[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
}

TEST_CASE("cudasim: divergent __syncthreads is reported with both call sites") {
  DeviceArray<int> out(64);
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s);
    cudaGetLastError();
    cudasim::launch(k_divergent, dim3(2, 2), dim3(64), 0, nullptr, out.get());
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    const std::string m = cudaGetErrorString(cudaErrorLaunchFailure);
    CAPTURE(m);
    CHECK(contains(m, "cudasim: divergent __syncthreads in block (0,0,0)"));
    CHECK(contains(m, "k_divergent"));
    CHECK(contains(m, at_line(g_line[0])));
    CHECK(contains(m, at_line(g_line[1])));
    CHECK(contains(ember::testing::thrown_message([&] { launch(k_divergent, dim3(1), dim3(64), 0, nullptr, out.get()); }),
                   "divergent __syncthreads"));
    // the emulator is fine afterwards
    launch(k_fine, dim3(3), dim3(64), 0, nullptr, out.get());
    CHECK(out.host()[63] == 63);
  }
}

__global__ void k_early_exit(int* out, int n) {
  const int i = int(threadIdx.x);
  if (i >= n) return;  // the classic bug: some threads never reach the barrier
  out[i] = i;
  LINE_OF(2, __syncthreads());
  out[64 + i] = out[i] + out[(i + 1) % n];
}

TEST_CASE("cudasim: a thread that exits while others wait at a barrier is reported") {
  DeviceArray<int> out(128);
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s);
    const std::string m = ember::testing::thrown_message([&] { launch(k_early_exit, dim3(1), dim3(64), 0, nullptr, out.get(), 50); });
    CAPTURE(m);
    CHECK(contains(m, "exited"));
    CHECK(contains(m, at_line(g_line[2])));
    launch(k_early_exit, dim3(1), dim3(64), 0, nullptr, out.get(), 64);  // every thread reaches it: fine
    CHECK(out.host()[64 + 10] == 21);
  }
}

// A shuffle where half the warp never arrives, and one where lanes wait at
// a __syncwarp while the others wait at a __syncthreads.
__global__ void k_half_warp_shuffle(int* out) {
  int v = int(threadIdx.x);
  if (threadIdx.x < 16) v = LINE_OF(3, __shfl_sync(0xffffffffu, v, 0));
  out[threadIdx.x] = v;
}
__global__ void k_warp_deadlock(int* out) {
  if (threadIdx.x % 32 < 8) {
    LINE_OF(4, __syncwarp());
  } else {
    LINE_OF(5, __syncthreads());
  }
  out[threadIdx.x] = 1;
}
__global__ void k_mixed_warp_ops(int* out) {
  if (threadIdx.x % 2)
    out[threadIdx.x] = int(LINE_OF(7, __ballot_sync(0xffffffffu, 1)));
  else
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
}
__global__ void k_bad_mask(int* out) { out[threadIdx.x] = int(__ballot_sync(0x1u, 1)); }
__global__ void k_bad_width(int* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1, 12); }
__global__ void k_trap(int* out) {
  out[threadIdx.x] = 1;
  if (threadIdx.x == 3) LINE_OF(6, __trap());
}

TEST_CASE("cudasim: warp operations with lanes that never arrive are reported") {
  DeviceArray<int> out(64);
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s);
    std::string m = ember::testing::thrown_message([&] { launch(k_half_warp_shuffle, dim3(1), dim3(32), 0, nullptr, out.get()); });
    CAPTURE(m);
    CHECK(contains(m, "exited"));
    CHECK(contains(m, "__shfl_sync"));
    CHECK(contains(m, at_line(g_line[3])));
    CHECK(contains(m, "0xffffffff"));

    m = ember::testing::thrown_message([&] { launch(k_warp_deadlock, dim3(1), dim3(64), 0, nullptr, out.get()); });
    CAPTURE(m);
    CHECK(contains(m, "deadlock"));
    CHECK(contains(m, "in __syncwarp at " + std::string(__FILE__) + ":" + std::to_string(g_line[4])));
    CHECK(contains(m, "in __syncthreads at " + std::string(__FILE__) + ":" + std::to_string(g_line[5])));
  }
  const std::string mixed = ember::testing::thrown_message([&] { launch(k_mixed_warp_ops, dim3(1), dim3(32), 0, nullptr, out.get()); });
  CHECK(contains(mixed, "meet at different warp operations"));
  CHECK(contains(mixed, "in __ballot_sync at " + std::string(__FILE__) + ":" + std::to_string(g_line[7])));
  CHECK(contains(mixed, "in __shfl_sync at "));
  CHECK(contains(ember::testing::thrown_message([&] { launch(k_bad_mask, dim3(1), dim3(32), 0, nullptr, out.get()); }),
                 "with mask 0x00000001"));
  CHECK(contains(ember::testing::thrown_message([&] { launch(k_bad_width, dim3(1), dim3(32), 0, nullptr, out.get()); }), "width 12"));
  const std::string m = ember::testing::thrown_message([&] { launch(k_trap, dim3(2), dim3(32), 0, nullptr, out.get()); });
  CHECK(contains(m, "__trap()"));
  CHECK(contains(m, "thread (3,0,0)"));
  CHECK(contains(m, at_line(g_line[6])));
}

// ----------------------------------------------- uninitialised shared memory
__device__ float read_helper_shared(unsigned t) {
  __shared__ float helper[32];           // in a device function, not the kernel
  if (t >= 1000) helper[t % 32] = 1.0f;  // never: a static never written would be folded to 0 by g++
  return helper[t % 32];
}

template <typename T>
__global__ void k_uninitialised(T* out, int* iout, float* dyn_out, float* helper_out) {
  __shared__ T tbuf[64];
  __shared__ int ibuf[64];
  EMBER_DYNAMIC_SHARED(float, dyn);
  const unsigned t = threadIdx.x;
  if (blockIdx.x == 0) {  // only block 0 writes: block 1 must not see its values
    tbuf[t] = T(1);
    ibuf[t] = 5;
    dyn[t] = 2.0f;
  }
  __syncthreads();
  const unsigned i = blockIdx.x * blockDim.x + t;
  out[i] = tbuf[t];
  iout[i] = ibuf[t];
  dyn_out[i] = dyn[t];
  helper_out[i] = read_helper_shared(t);
}

template <typename T>
void check_uninitialised() {
  DeviceArray<T> out(128);
  DeviceArray<int> iout(128);
  DeviceArray<float> dyn_out(128), helper_out(128);
  launch(k_uninitialised<T>, dim3(2), dim3(64), 64 * sizeof(float), nullptr, out.get(), iout.get(), dyn_out.get(),
         helper_out.get());
  const std::vector<T> o = out.host();
  const std::vector<int> io = iout.host();
  const std::vector<float> d = dyn_out.host(), h = helper_out.host();
  for (int i = 0; i < 128; ++i) {
    CAPTURE(i);
    if (i < 64) {
      CHECK(o[i] == T(1));
      CHECK(io[i] == 5);
      CHECK(d[i] == 2.0f);
    } else {
      CHECK(std::isnan(double(o[i])));
      CHECK(io[i] == -1);
      CHECK(std::isnan(d[i]));
    }
    CHECK(std::isnan(h[i]));
  }
}

TEST_CASE("cudasim: uninitialised shared memory reads come out as NaN or -1, in every block") {
  check_uninitialised<float>();
  check_uninitialised<double>();
}

// ------------------------------------------------------------------ schedules
// Each thread logs its index when it runs, before and after a barrier.
__global__ void k_order(unsigned* log, unsigned* count) {
  log[atomicAdd(&count[0], 1u)] = threadIdx.x;
  __syncthreads();
  log[blockDim.x + atomicAdd(&count[1], 1u)] = threadIdx.x;
}

std::vector<unsigned> run_order(cudasim::Schedule s, uint64_t seed) {
  ScheduleGuard guard(s, seed);
  DeviceArray<unsigned> log(128), count(std::vector<unsigned>{0, 0});
  launch(k_order, dim3(1), dim3(64), 0, nullptr, log.get(), count.get());
  return log.host();
}

TEST_CASE("cudasim: threads run in forward, reverse or seeded random order between barriers") {
  std::vector<unsigned> forward(64), reverse(64);
  for (unsigned i = 0; i < 64; ++i) forward[i] = i;
  for (unsigned i = 0; i < 64; ++i) reverse[i] = 63 - i;
  const auto halves = [](const std::vector<unsigned>& v) {
    return std::make_pair(std::vector<unsigned>(v.begin(), v.begin() + 64),
                          std::vector<unsigned>(v.begin() + 64, v.end()));
  };
  const auto [f1, f2] = halves(run_order(cudasim::Schedule::forward, 1));
  CHECK(f1 == forward);
  CHECK(f2 == forward);
  const auto [r1, r2] = halves(run_order(cudasim::Schedule::reverse, 1));
  CHECK(r1 == reverse);
  CHECK(r2 == reverse);
  const auto [a1, a2] = halves(run_order(cudasim::Schedule::random, 5));
  CHECK(a1 != forward);
  CHECK(a1 != reverse);
  CHECK(a2 != a1);  // a new order after the barrier
  CHECK(a2 != forward);
  for (std::vector<unsigned> sorted : {a1, a2}) {
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == forward);
  }
  CHECK(run_order(cudasim::Schedule::random, 5) == run_order(cudasim::Schedule::random, 5));  // the seed decides
  CHECK(run_order(cudasim::Schedule::random, 5) != run_order(cudasim::Schedule::random, 6));
}

// ------------------------------------------------------------ missing barrier
template <bool kBarrier>
__global__ void k_neighbours(const int* in, int* out) {
  __shared__ int s[64];
  const unsigned t = threadIdx.x;
  s[t] = in[blockIdx.x * 64 + t];
  if (kBarrier) __syncthreads();
  out[blockIdx.x * 64 + t] = s[(t + 1) % 64] + s[(t + 63) % 64];
}

TEST_CASE("cudasim: a missing barrier gives wrong results in the forward and reverse schedules") {
  std::vector<int> in(128), want(128);
  for (int i = 0; i < 128; ++i) in[i] = i * i;
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 64; ++t) want[b * 64 + t] = in[b * 64 + (t + 1) % 64] + in[b * 64 + (t + 63) % 64];
  DeviceArray<int> din(in), out(128);
  for (cudasim::Schedule s : kAllSchedules) {
    CAPTURE(name_of(s));
    ScheduleGuard guard(s, 7);
    launch(k_neighbours<true>, dim3(2), dim3(64), 0, nullptr, din.get(), out.get());
    CHECK(out.host() == want);
    launch(k_neighbours<false>, dim3(2), dim3(64), 0, nullptr, din.get(), out.get());
    if (s != cudasim::Schedule::random) CHECK(out.host() != want);
  }
}

// -------------------------------------------------------- fibers and stacks
__global__ void k_no_barrier(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

TEST_CASE("cudasim: threads without barriers share one stack, threads at barriers keep theirs") {
  DeviceArray<int> out(4096);
  launch(k_no_barrier, dim3(4), dim3(1024), 0, nullptr, out.get());
  CHECK(cudasim::stats().last_launch_peak_fibers == 1);
  launch(k_fine, dim3(2), dim3(256), 0, nullptr, out.get());
  CHECK(cudasim::stats().last_launch_peak_fibers == 256);
  const cudasim::Stats s = cudasim::stats();
  CHECK(s.stack_bytes >= 64 * 1024);
  launch(k_fine, dim3(2), dim3(256), 0, nullptr, out.get());
  CHECK(cudasim::stats().fibers == s.fibers);  // reused, not made again
}

// ------------------------------------------------------------- fast math
__global__ void k_math(float* out) {
  const float x = 0.75f;
  out[0] = __expf(x);
  out[1] = __logf(x);
  out[2] = __powf(x, 2.5f);
  out[3] = __sinf(x) + __cosf(x);
  out[4] = __fdividef(1.0f, x) + rsqrtf(x) + __frcp_rn(x) + __fsqrt_rn(x);
  out[5] = __saturatef(1.5f) + __saturatef(-2.0f) + __fmaf_rn(x, x, x);
  out[6] = float(__float2int_rn(2.5f) + __float2int_rn(3.5f) + __float2int_rn(-1e20f) / 1000000000);
  out[7] = __half2float(__hfma(__float2half(1.5f), __float2half(2.0f), __float2half(0.25f))) +
           __half2float(hsqrt(__float2half(4.0f))) + __half2float(hexp(__float2half(0.0f))) +
           __half2float(hlog(__float2half(1.0f))) + __half2float(hrsqrt(__float2half(4.0f))) +
           float(__half2int_rn(__float2half(2.5f)));
  out[8] = __int_as_float(__float_as_int(x)) + float(__popc(0xf0u) + __clz(1) + __ffs(8));
  out[9] = float(max(3, 4) + min(2u, 5u)) + max(1.0f, 2.0f) + float(rsqrt(4.0));
}

TEST_CASE("cudasim: fast-math, rounding, __half and integer intrinsics") {
  DeviceArray<float> out(10);
  launch(k_math, dim3(1), dim3(1), 0, nullptr, out.get());
  const std::vector<float> o = out.host();
  const float x = 0.75f;
  CHECK(o[0] == doctest::Approx(std::exp(x)).epsilon(1e-6));
  CHECK(o[1] == doctest::Approx(std::log(x)).epsilon(1e-6));
  CHECK(o[2] == doctest::Approx(std::pow(x, 2.5f)).epsilon(1e-6));
  CHECK(o[3] == doctest::Approx(std::sin(x) + std::cos(x)).epsilon(1e-6));
  CHECK(o[4] == doctest::Approx(2.0f / x + 1.0f / std::sqrt(x) + std::sqrt(x)).epsilon(1e-6));
  CHECK(o[5] == doctest::Approx(1.0f + x * x + x).epsilon(1e-6));
  CHECK(o[6] == float(2 + 4 + (-2147483647 - 1) / 1000000000));
  CHECK(o[7] == 3.25f + 2.0f + 1.0f + 0.0f + 0.5f + 2.0f);
  CHECK(o[8] == x + float(4 + 31 + 4));
  CHECK(o[9] == 4.0f + 2.0f + 2.0f + 0.5f);
}

// --------------------------------------------- AddressSanitizer (SANITIZE=1)
#if defined(__SANITIZE_ADDRESS__)
__global__ void k_global_oob(int* out) { out[threadIdx.x] = 1; }  // launched with one thread too many

// These two index a static array out of its bounds on purpose: UBSan's own
// bounds check (fatal in the sanitizer build) would stop them before the
// access, so it is off here and the emulator's shared-memory poisoning is
// what reports them, which is what this test is about.
template <typename T>
__attribute__((no_sanitize_undefined)) __global__ void k_shared_oob_template(T* out) {
  __shared__ T buf[64];
  buf[threadIdx.x] = T(threadIdx.x);  // one thread too many: buf[64]
  __syncthreads();
  out[threadIdx.x % 64] = buf[63 - threadIdx.x % 64];
}

__attribute__((no_sanitize_undefined)) __global__ void k_shared_oob_plain(float* out) {
  __shared__ float buf[64];
  buf[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  out[threadIdx.x % 64] = buf[63 - threadIdx.x % 64];
}

__global__ void k_dynamic_oob(float* out) {
  EMBER_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  out[threadIdx.x % 64] = s[0];
}

// Runs f in a fork()ed child with stderr captured; returns what it wrote
// and whether the child died (AddressSanitizer exits with status 1).
std::string in_child(const std::function<void()>& f, bool& died) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    f();
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t r; (r = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, size_t(r));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  died = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return text;
}

TEST_CASE("cudasim: AddressSanitizer reports out-of-bounds global and shared memory in kernels") {
  bool died = false;
  std::string text = in_child(
      [] {
        int* p = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(int));
        launch(k_global_oob, dim3(1), dim3(65), 0, nullptr, p);
      },
      died);
  CAPTURE(text);
  CHECK(died);
  CHECK(contains(text, "heap-buffer-overflow"));
  CHECK(contains(text, "test_cudasim.cpp"));
  CHECK(contains(text, "cudasim: AddressSanitizer error in thread (64,0,0) of block (0,0,0)"));

  text = in_child(
      [] {
        float* p = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float));
        launch(k_shared_oob_template<float>, dim3(1), dim3(65), 0, nullptr, p);
      },
      died);
  CAPTURE(text);
  CHECK(died);
  CHECK(contains(text, "AddressSanitizer"));
  CHECK(contains(text, "k_shared_oob_template"));
  CHECK(contains(text, "test_cudasim.cpp"));

  text = in_child(
      [] {
        float* p = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float));
        launch(k_shared_oob_plain, dim3(1), dim3(65), 0, nullptr, p);
      },
      died);
  CAPTURE(text);
  CHECK(died);
  CHECK(contains(text, "global-buffer-overflow"));
  CHECK(contains(text, "test_cudasim.cpp"));

  text = in_child(
      [] {
        float* p = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float));
        launch(k_dynamic_oob, dim3(1), dim3(65), 64 * sizeof(float), nullptr, p);
      },
      died);
  CAPTURE(text);
  CHECK(died);
  CHECK(contains(text, "heap-buffer-overflow"));
  CHECK(contains(text, "test_cudasim.cpp"));

  // and the same kernels within bounds run clean
  text = in_child(
      [] {
        float* p = nullptr;
        cudaMalloc(reinterpret_cast<void**>(&p), 64 * sizeof(float));
        launch(k_shared_oob_template<float>, dim3(1), dim3(64), 0, nullptr, p);
        launch(k_shared_oob_plain, dim3(1), dim3(64), 0, nullptr, p);
        launch(k_dynamic_oob, dim3(1), dim3(64), 64 * sizeof(float), nullptr, p);
      },
      died);
  CAPTURE(text);
  CHECK(!died);
}
#endif

}  // namespace
