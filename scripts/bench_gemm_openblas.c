/* scripts/bench_gemm_openblas.c — OpenBLAS cblas_sgemm GFLOP/s, a reference
 * point for ember's own GEMM (ops/cpu/gemm*). A benchmark only: never linked
 * into ember and not built by the Makefile; scripts/bench_gemm_openblas.sh
 * installs OpenBLAS, compiles this to /tmp and runs it.
 *
 *   bench_gemm_openblas [--reps R] [--min-ms T] [-v] [N | MxNxK]...
 *
 * Each argument is a problem: N alone is the square N x N x N, MxNxK is
 * C[MxN] = A[MxK] * B[KxN] (row major, no transposes, alpha 1, beta 0).
 * Default problems: 1024 2048. Each problem gets a warm-up call, then R
 * repetitions (default 7); one repetition loops sgemm until at least T ms
 * (default 50) have passed so that small problems are timed over many calls.
 * The thread count is OpenBLAS's own (OPENBLAS_NUM_THREADS).
 *
 * Prints the core type OpenBLAS chose, then one line per problem:
 *   sgemm M N K  GFLOP/s X
 * where X is the median of the R repetitions (2*M*N*K flops per call);
 * -v adds each problem's minimum and maximum on stderr.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static float* filled(long n, unsigned seed) {
  float* p = (float*)aligned_alloc(64, (size_t)((n * sizeof(float) + 63) / 64 * 64));
  if (!p) {
    fprintf(stderr, "bench_gemm_openblas: out of memory\n");
    exit(1);
  }
  for (long i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
  }
  return p;
}

static int verbose = 0;

static void run(long m, long n, long k, int reps, double min_s) {
  float* a = filled(m * k, 1);
  float* b = filled(k * n, 2);
  float* c = filled(m * n, 3);
  double* gflops = (double*)malloc(sizeof(double) * (size_t)reps);
  const double flops = 2.0 * (double)m * (double)n * (double)k;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f, c,
              (int)n);  /* warm-up: thread start, page faults, caches */
  for (int r = 0; r < reps; ++r) {
    long calls = 0;
    const double t0 = now_s();
    double dt;
    do {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b, (int)n, 0.0f,
                  c, (int)n);
      ++calls;
      dt = now_s() - t0;
    } while (dt < min_s);
    gflops[r] = flops * (double)calls / dt / 1e9;
  }
  qsort(gflops, (size_t)reps, sizeof(double), cmp_double);
  printf("sgemm %ld %ld %ld  GFLOP/s %.1f\n", m, n, k, gflops[reps / 2]);
  fflush(stdout);
  if (verbose) fprintf(stderr, "  (min %.1f max %.1f over %d reps)\n", gflops[0], gflops[reps - 1], reps);
  free(gflops);
  free(a);
  free(b);
  free(c);
}

static int parse_problem(const char* s, long* m, long* n, long* k) {
  char tail;
  if (sscanf(s, "%ldx%ldx%ld%c", m, n, k, &tail) == 3) return *m > 0 && *n > 0 && *k > 0;
  if (sscanf(s, "%ld%c", m, &tail) == 1 && *m > 0) {
    *n = *k = *m;
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  int reps = 7;
  double min_ms = 50.0;
  const char* defaults[] = {"1024", "2048"};
  const char** problems = (const char**)malloc(sizeof(char*) * (size_t)(argc + 2));
  int count = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc) {
      min_ms = atof(argv[++i]);
    } else if (!strcmp(argv[i], "-v")) {
      verbose = 1;
    } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: %s [--reps R] [--min-ms T] [-v] [N | MxNxK]...\n", argv[0]);
      return 0;
    } else {
      problems[count++] = argv[i];
    }
  }
  if (reps < 1) reps = 1;
  if (count == 0) {
    problems[0] = defaults[0];
    problems[1] = defaults[1];
    count = 2;
  }
  printf("OpenBLAS core: %s, threads: %d, config: %s\n", openblas_get_corename(), openblas_get_num_threads(),
         openblas_get_config());
  fflush(stdout);
  for (int i = 0; i < count; ++i) {
    long m, n, k;
    if (!parse_problem(problems[i], &m, &n, &k)) {
      fprintf(stderr, "bench_gemm_openblas: '%s' is neither N nor MxNxK\n", problems[i]);
      return 2;
    }
    run(m, n, k, reps, min_ms * 1e-3);
  }
  free(problems);
  return 0;
}
