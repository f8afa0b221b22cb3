// tests/sim/test_kernel_lab.cpp — build/kernel_lab_sim (apps/bench/kernel_lab.cpp
// on the emulator with the profiler's instrumented kernels): it checks each
// op against the CPU kernel, fails when the check fails, and prints the
// profile of ember's own kernels (the GEMM's tiles: 4 sectors per global
// load, the source lines of the shared loads; the mma.sync convolutions'
// 16-byte stores).
#include <doctest/doctest.h>
#include <unistd.h>

#include <string>

#include "tests/support/process_helpers.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"

namespace {

std::string lab_path() { return ember::testing::process::binary_dir() + "/kernel_lab_sim"; }
bool lab_built() { return ::access(lab_path().c_str(), X_OK) == 0; }
const ember::testing::needs kLab{"build/kernel_lab_sim is not built in this tree (make test and the AddressSanitizer build leave it out; make builds it)",
                                 lab_built};

std::string run_lab(const std::vector<std::string>& args, int* code) {
  std::vector<std::string> argv{lab_path()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  const ember::testing::TempDir dir;  // the runner's logs
  *code = ember::testing::process::run_command(argv, 120, dir.path.string(), "kernel_lab_sim", &out);
  return out;
}

}  // namespace

TEST_CASE("kernel_lab_sim: a GEMM and a convolution are checked against the CPU and profiled per source line" * kLab) {
  int code = -1;
  const std::string out = run_lab({"--op", "gemm", "--m", "64", "--ncols", "96", "--kdim", "48"}, &code);
  INFO(out);
  CHECK(code == 0);
  CHECK(out.find("== gemm  C [64,96] = A [64,48] B [48,96]") != std::string::npos);
  CHECK(out.find("check against the CPU kernel") != std::string::npos);
  CHECK(out.find(": ok") != std::string::npos);
  CHECK(out.find("gemm_tiled_kernel") != std::string::npos);
  CHECK(out.find("global loads") != std::string::npos);
  CHECK(out.find("4.00 sectors/request") != std::string::npos);  // the A and B tiles are read a row of a warp at a time
  CHECK(out.find("shared loads") != std::string::npos);
  // the staged tiles' row padding keeps the k-fastest A tile's stores free of bank conflicts
  const size_t stores = out.find("shared stores");
  REQUIRE(stores != std::string::npos);
  CHECK(out.substr(stores, out.find('\n', stores) - stores).find(" 1.00 wavefronts/request (ideal 1.00)") !=
        std::string::npos);
  CHECK(out.find("cuda/kernels/gemm.cuh:") != std::string::npos);
  CHECK(out.find("estimate per launch: H100 SXM") != std::string::npos);
  // the CUDA build left ptxas's reports next to the lab: registers and occupancy of the real kernel
  if (::access((ember::testing::process::binary_dir() + "/ptx/cuda/kernels/gemm.ptxas.log").c_str(), R_OK) == 0) {
    CHECK(out.find("ptxas sm_") != std::string::npos);
    CHECK(out.find(" registers, ") != std::string::npos);
    CHECK(out.find("occupancy ") != std::string::npos);
  } else {
    CHECK(out.find("ptxas: no report for this kernel") != std::string::npos);
  }

  const std::string conv =
      run_lab({"--op", "conv2d_backward_data", "--n", "2", "--c", "8", "--hw", "9", "--k", "8", "--stride", "2"}, &code);
  INFO(conv);
  CHECK(code == 0);
  CHECK(conv.find("stride 2 pad 1 -> y [2,8,5,5]") != std::string::npos);
  CHECK(conv.find(": ok") != std::string::npos);
  CHECK(conv.find("cuda/kernels/conv.cu:") != std::string::npos);

  // stride-2 data gradient by phases: no multiply by the zeros of the upsampled gradient
  // (one GEMM over all taps declared 4.00x the FLOPs the op needs)
  const std::string phases =
      run_lab({"--op", "conv2d_backward_data", "--n", "4", "--c", "64", "--hw", "16", "--k", "16", "--stride", "2"},
              &code);
  INFO(phases);
  CHECK(code == 0);
  CHECK(phases.find("its kernels declare (1.00x") != std::string::npos);
  CHECK(phases.find("4 launch(es)") != std::string::npos);
}

TEST_CASE("kernel_lab_sim: a result outside the tolerance fails, naming the op" * kLab) {
  int code = -1;
  const std::string out = run_lab({"--op", "add_relu", "--n", "1", "--c", "3", "--hw", "5", "--tolerance", "-1"}, &code);
  INFO(out);
  CHECK(code == 1);
  CHECK(out.find("FAILED") != std::string::npos);
  CHECK(out.find("1 op(s) FAILED the check against the CPU") != std::string::npos);
  const std::string bad = run_lab({"--op", "softmax"}, &code);
  CHECK(code == 2);
  CHECK(bad.find("kernel_lab: error: --op softmax: unknown") != std::string::npos);
}

// The count of global load requests in a report's "global loads" line ("1.02 K" is 1020).
double load_requests(const std::string& out) {
  const size_t at = out.find("global loads");
  REQUIRE(at != std::string::npos);
  size_t end = 0;
  const double v = std::stod(out.substr(at + 12), &end);
  const bool kilo = out.compare(at + 12 + end, 2, " K") == 0;
  return kilo ? v * 1000 : v;
}

TEST_CASE("kernel_lab_sim: the memory-bound ops move 16-byte packs: a quarter (f32) or an eighth (f16) of the "
          "requests of the element-by-element path" * kLab) {
  int code = -1;
  for (const char* op : {"add", "relu_backward", "batch_norm_add_relu_forward_train"}) {
    CAPTURE(op);
    const std::vector<std::string> shape{"--op", op, "--n", "2", "--c", "4", "--hw", "16", "--lines", "0"};
    std::vector<std::string> f16 = shape, misaligned = shape;
    f16.insert(f16.end(), {"--dtype", "f16"});
    misaligned.insert(misaligned.end(), {"--misalign", "1"});
    const std::string packs = run_lab(shape, &code);
    INFO(packs);
    CHECK(code == 0);
    CHECK(packs.find(": ok") != std::string::npos);
    const std::string halves = run_lab(f16, &code);
    INFO(halves);
    CHECK(code == 0);
    CHECK(halves.find(": ok") != std::string::npos);
    const std::string scalar = run_lab(misaligned, &code);
    INFO(scalar);
    CHECK(code == 0);
    CHECK(scalar.find("off 16-byte alignment") != std::string::npos);
    CHECK(scalar.find(": ok") != std::string::npos);
    // the elementwise kernel's loads (batch norm's forward_apply_kernel: its statistics pass is not packed)
    const bool batch_norm = std::string(op).rfind("batch_norm", 0) == 0;
    auto kernel_loads = [&](const std::string& out) {
      const size_t kernel = batch_norm ? out.find("forward_apply_kernel") : 0;
      REQUIRE(kernel != std::string::npos);
      const size_t at = out.find("global loads", kernel);
      REQUIRE(at != std::string::npos);
      return load_requests(out.substr(at));
    };
    const double p32 = kernel_loads(packs), p16 = kernel_loads(halves), s32 = kernel_loads(scalar);
    CHECK(s32 >= 3.5 * p32);  // 4 floats per request-lane instead of 1
    CHECK(p32 >= 1.9 * p16);  // 8 halves per lane instead of 4 floats
  }
  // 2048 floats, two operands: 2048 * 2 / (4 * 32) requests of 16 sectors each
  const std::string add = run_lab({"--op", "add", "--n", "2", "--c", "4", "--hw", "16", "--lines", "0"}, &code);
  CHECK(add.find("global loads           32 requests, 32.0 lanes, 16.00 sectors/request (ideal 16.00)") !=
        std::string::npos);
}

TEST_CASE("kernel_lab_sim: the GEMM ladder: every rung at three block sizes matches the CPU; coalescing shows" * kLab) {
  int code = -1;
  const std::string out = run_lab({"--op", "gemm-ladder", "--m", "64", "--ncols", "96", "--kdim", "40", "--lines", "0"},
                                  &code);
  INFO(out);
  CHECK(code == 0);
  size_t oks = 0;
  for (size_t p = out.find(": ok"); p != std::string::npos; p = out.find(": ok", p + 1)) ++oks;
  CHECK(oks == 16);  // 3 + 3 + 3 rungs, ember's GEMM, 3 + 3 vector rungs
  // The section of one rung: from its "== name" header to the next.
  auto section = [&](const std::string& name) {
    const size_t at = out.find("== " + name + " ");
    REQUIRE(at != std::string::npos);
    return out.substr(at, out.find("\n== ", at + 1) - at);
  };
  // lanes down a column of C: each lane reads its own row of A (32 sectors), B is a broadcast (1)
  CHECK(section("gemm/naive_cols/32x8").find("global loads") != std::string::npos);
  CHECK(section("gemm/naive_cols/32x8").find("16.50 sectors/request") != std::string::npos);
  // lanes along a row of C: A is a broadcast (1), B 32 consecutive floats (4)
  CHECK(section("gemm/naive_rows/32x8").find(" 2.50 sectors/request") != std::string::npos);
  // shared tiles: whole rows of 16 floats per half-warp, staged once per tile
  CHECK(section("gemm/shared_tiles/16x16").find("shared loads") != std::string::npos);
  const std::string bad = run_lab({"--op", "gemm/shared_tiles/16x8"}, &code);
  CHECK(code == 2);
  CHECK(bad.find("the block must be square") != std::string::npos);
  // the vector rungs: float4 shared loads (4 wavefronts, the ideal), conflict-free
  // transposed stores, and one barrier a step instead of two with two buffers
  for (const char* b : {"16x16", "32x8", "8x32"})
    for (const char* v : {"vector_tiles", "vector_double"}) {
      const std::string sec = section(std::string("gemm/") + v + "/" + b);
      CAPTURE(sec);
      CHECK(sec.find("4.00 wavefronts/request (ideal 4.00): no bank conflicts") != std::string::npos);
      CHECK(sec.find("shared stores") != std::string::npos);
      CHECK(sec.find("-way bank conflicts") == std::string::npos);
    }
  CHECK(section("gemm/vector_tiles/16x16").find(" 12 barriers") != std::string::npos);  // 2 blocks x 3 steps x 2
  CHECK(section("gemm/vector_double/16x16").find(" 8 barriers") != std::string::npos);  // 2 x (1 + 3)
  const std::string odd = run_lab({"--op", "gemm/vector_tiles/16x16", "--ncols", "90"}, &code);
  CHECK(code == 2);
  CHECK(odd.find("N = 90 and K = ") != std::string::npos);
  CHECK(odd.find("must be multiples of 4") != std::string::npos);
  CHECK(run_lab({"--op", "gemm/vector_double/16x8"}, &code).find("expected 16x16, 32x8 or 8x32") != std::string::npos);
  CHECK(code == 2);
}

TEST_CASE("kernel_lab_sim: the batch-norm statistics ladder: two passes, the naive one pass, Welford, ember's" * kLab) {
  int code = -1;
  const std::string out =
      run_lab({"--op", "bn-stats-ladder", "--n", "4", "--c", "6", "--hw", "9", "--lines", "0"}, &code);
  INFO(out);
  CHECK(code == 0);  // the naive version's failure is expected and does not fail the run
  auto section = [&](const std::string& name) {
    const size_t at = out.find("== " + name + " ");
    REQUIRE(at != std::string::npos);
    return out.substr(at, out.find("\n== ", at + 1) - at);
  };
  for (const char* t : {"64", "256", "1024"}) {
    CAPTURE(t);
    CHECK(section(std::string("bn_stats/two_pass/") + t).find(": ok") != std::string::npos);
    CHECK(section(std::string("bn_stats/welford/") + t).find(": ok") != std::string::npos);
    // E[x^2] - E[x]^2 with a mean of 100 and a variance of 1/3 loses the variance
    CHECK(section(std::string("bn_stats/naive_one_pass/") + t).find("FAILED, as this version must") !=
          std::string::npos);
  }
  CHECK(section("bn_stats/ember").find(": ok") != std::string::npos);
  // two passes read x twice: two kernels; the one-pass versions one
  CHECK(section("bn_stats/two_pass/256").find("centered_variance_kernel") != std::string::npos);
  CHECK(section("bn_stats/welford/256").find("kernel ") == section("bn_stats/welford/256").rfind("kernel "));

  // With a mean near zero there is nothing to cancel: the naive version passes.
  const std::string centred = run_lab({"--op", "bn_stats/naive_one_pass/256", "--n", "4", "--c", "6", "--hw", "9",
                                       "--bn-offset", "0", "--lines", "0"},
                                      &code);
  INFO(centred);
  CHECK(code == 0);
  CHECK(centred.find(": ok") != std::string::npos);
  // Welford holds at a larger offset, where the naive error grows 10x. (Past
  // ~500 no f32 version passes 1e-4: the mean itself is rounded to 2^-24 of
  // the offset, compared with a variance of 1/3.)
  const std::string far = run_lab({"--op", "bn_stats/welford/128", "--n", "4", "--c", "6", "--hw", "9",
                                   "--bn-offset", "300", "--lines", "0"},
                                  &code);
  INFO(far);
  CHECK(code == 0);
  CHECK(far.find(": ok") != std::string::npos);
  const std::string bad = run_lab({"--op", "bn_stats/kahan/64"}, &code);
  CHECK(code == 2);
  CHECK(bad.find("unknown batch-norm statistics version 'kahan'") != std::string::npos);
}

TEST_CASE("kernel_lab_sim: the convolution ladder: direct, ember's implicit GEMM, the tap table, the column "
          "decoded once, all match the CPU" *
          kLab) {
  for (const char* stride : {"1", "2"}) {
    CAPTURE(stride);
    int code = -1;
    const std::string out = run_lab({"--op", "conv-ladder", "--n", "3", "--c", "5", "--hw", "11", "--k", "7", "--r",
                                     "3", "--stride", stride, "--pad", "1", "--lines", "0"},
                                    &code);
    INFO(out);
    CHECK(code == 0);
    size_t oks = 0;
    for (size_t p = out.find(": ok"); p != std::string::npos; p = out.find(": ok", p + 1)) ++oks;
    CHECK(oks == 4);
    CHECK(out.find("== conv2d_forward/direct ") != std::string::npos);
    CHECK(out.find("== conv2d_forward/tap_table ") != std::string::npos);
    CHECK(out.find("== conv2d_forward/column_once ") != std::string::npos);
    CHECK(out.find("conv_direct_kernel") != std::string::npos);
    CHECK(out.find("TapTableB") != std::string::npos);
    CHECK(out.find("conv_column_once_kernel") != std::string::npos);
  }
  // column_once across several row and k tiles (130 channels out, C*R*S =
  // 630), a partial column tile, and a 1x1 filter
  for (const std::vector<std::string>& shape :
       {std::vector<std::string>{"--n", "2", "--c", "70", "--hw", "9", "--k", "130", "--r", "3", "--stride", "2"},
        std::vector<std::string>{"--n", "2", "--c", "3", "--hw", "12", "--k", "5", "--r", "1", "--pad", "0"}}) {
    std::vector<std::string> args = {"--op", "conv2d_forward/column_once", "--lines", "0"};
    args.insert(args.end(), shape.begin(), shape.end());
    int code = -1;
    const std::string out = run_lab(args, &code);
    INFO(out);
    CHECK(code == 0);
    CHECK(out.find(": ok") != std::string::npos);
  }
  int code = -1;
  const std::string bad = run_lab({"--op", "conv2d_forward/winograd"}, &code);
  CHECK(code == 2);
  CHECK(bad.find("unknown convolution version 'winograd'") != std::string::npos);
  const std::string f16 = run_lab({"--op", "conv2d_forward/tap_table", "--dtype", "f16"}, &code);
  CHECK(code == 2);
  CHECK(f16.find("runs in f32 only") != std::string::npos);
}

TEST_CASE("kernel_lab_sim: the mma.sync convolutions store whole 16-byte chunks through shared memory, without bank "
          "conflicts" * kLab) {
  for (const char* op : {"conv2d_forward", "conv2d_backward_data", "conv2d_backward_filter"}) {
    CAPTURE(op);
    int code = -1;
    const std::string out = run_lab({"--op", op, "--dtype", "f16", "--layout", "nhwc", "--n", "2", "--c", "64",
                                     "--hw", "8", "--k", "64", "--lines", "0"},
                                    &code);
    INFO(out);
    CHECK(code == 0);
    REQUIRE(out.find("_kernel<__half, ember::cuda::MmaTile<") != std::string::npos);
    const auto line = [&](const char* what) {
      const size_t at = out.find(what);
      return at == std::string::npos ? std::string() : out.substr(at, out.find('\n', at) - at);
    };
    // 32 lanes x 16 bytes of consecutive channels: 16 sectors a request (pairs of channels straight from
    // the accumulators would make 8 sectors a request, each half used)
    CHECK(line("global stores").find("16.00 sectors/request (ideal 16.00): 100% of the fetched bytes used") !=
          std::string::npos);
    // the staged rows' spare chunk keeps the accumulators' writes (8 rows at once) off each other's banks
    CHECK(line("shared stores").find("no bank conflicts") != std::string::npos);
    CHECK(line("shared loads").find("no bank conflicts") != std::string::npos);
  }
}
