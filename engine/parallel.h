// engine/parallel.h — the CPU thread pool: OpenMP, behind two small calls.
//
// ember's CPU kernels parallelise with parallel_for over an index range;
// the number of threads is set once by the apps (--threads).
#pragma once
#include <algorithm>
#include <cstdint>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace ember {

inline void set_num_threads(int n) {
#if defined(_OPENMP)
  if (n > 0) omp_set_num_threads(n);
#else
  (void)n;
#endif
}

inline int num_threads() {
#if defined(_OPENMP)
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// Calls f(begin, end) on contiguous chunks of [begin, end) in parallel; runs
// inline when the range is smaller than `grain` or we are already inside a
// parallel region.
template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& f) {
  const int64_t n = end - begin;
  if (n <= 0) return;
#if defined(_OPENMP)
  if (n > grain && !omp_in_parallel() && omp_get_max_threads() > 1) {
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t chunk = (n + nt - 1) / nt;
      const int64_t b = begin + t * chunk, e = std::min(end, b + chunk);
      if (b < e) f(b, e);
    }
    return;
  }
#else
  (void)grain;
#endif
  f(begin, end);
}

// Calls f(t) for every share t in [0, shares), each share on its own thread
// (so that thread-local buffers, such as a share's partial sums, are
// distinct), or all on the calling thread when shares is 1. The callers sum
// the shares' results in share order afterwards, so results do not depend
// on scheduling.
template <typename F>
void for_each_share(int shares, F&& f) {
  if (shares <= 1) {
    if (shares == 1) f(0);
    return;
  }
#if defined(_OPENMP)
#pragma omp parallel for num_threads(shares) schedule(static, 1)
#endif
  for (int t = 0; t < shares; ++t) f(t);
}

}  // namespace ember
