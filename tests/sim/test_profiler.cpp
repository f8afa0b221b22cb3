// tests/sim/test_profiler.cpp — the emulator's profiler (cuda/sim/profiler.cpp,
// CUDASIM_PROFILE=1) on kernels whose counters are known
// (tests/sim/profiler_kernels.cpp): coalescing as sectors per request,
// shared-memory bank conflicts as wavefronts per request (4- and 8-byte
// words), broadcasts, active lanes of a half-divergent warp, declared FLOPs,
// per-line attribution, stack memory left out, and the roofline estimate.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "tests/sim/profiler_kernels.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"

namespace {

template <typename T>
struct Device {
  T* p = nullptr;
  explicit Device(size_t n, T value = T(1)) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == cudaSuccess);
    std::vector<T> v(n, value);
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

// Profiling on, counters empty; off again at the end.
struct Profiling {
  Profiling() {
    cudasim::set_profiling(true);
    cudasim::reset_profile();
  }
  ~Profiling() {
    cudasim::set_profiling(false);
    cudasim::reset_profile();
  }
  Profiling(const Profiling&) = delete;
  Profiling& operator=(const Profiling&) = delete;
};

// The one kernel profiled whose name contains `part`.
cudasim::KernelProfile kernel_named(const std::string& part) {
  cudasim::KernelProfile found;
  int n = 0;
  for (auto& k : cudasim::profile())
    if (k.name.find(part) != std::string::npos) {
      found = k;
      ++n;
    }
  INFO("kernels named like " << part);
  REQUIRE(n == 1);
  return found;
}

// "tests/sim/profiler_kernels.cpp:<line>" of the line with `marker`.
std::string line_of(const std::string& marker) {
  std::ifstream in("tests/sim/profiler_kernels.cpp");
  REQUIRE(in.good());
  std::string text;
  for (int n = 1; std::getline(in, text); ++n)
    if (text.find("// profile: " + marker) != std::string::npos)
      return "tests/sim/profiler_kernels.cpp:" + std::to_string(n) + " ";
  FAIL("no line marked " << marker);
  return {};
}

const cudasim::LineProfile& line_at(const cudasim::KernelProfile& k, const std::string& where) {
  for (const auto& l : k.lines)
    if (l.where.rfind(where, 0) == 0) return l;
  std::string all;
  for (const auto& l : k.lines) all += l.where + "\n";
  INFO("lines of " << k.name << ":\n" << all);
  FAIL("no profile line at " << where);
  return k.lines.front();
}

bool instrumented() { return cudasim::profiler_instrumented(); }
const ember::testing::needs kInstrumented{
    "the kernels are not instrumented for the profiler (the AddressSanitizer build)", instrumented};

}  // namespace

TEST_CASE("cudasim profiler: global loads count 32-byte sectors per warp request (stride 1, 2, 8, 32)" * kInstrumented) {
  const struct {
    int stride;
    uint64_t sectors;
  } cases[] = {{1, 4}, {2, 8}, {4, 16}, {8, 32}, {32, 32}};
  for (const auto& c : cases) {
    CAPTURE(c.stride);
    Device<float> x(32 * size_t(c.stride)), y(32);
    Profiling on;
    profiler_kernels::strided_load(x.p, y.p, c.stride);
    const auto k = kernel_named("strided_load_kernel");
    CHECK(k.launches == 1);
    CHECK(k.threads == 32);
    CHECK(k.counts.global_load.requests == 1);
    CHECK(k.counts.global_load.lanes == 32);
    CHECK(k.counts.global_load.bytes == 128);
    CHECK(k.counts.global_load.units == c.sectors);
    CHECK(k.counts.global_load.ideal_units == 4);
    CHECK(k.counts.global_store.requests == 1);
    CHECK(k.counts.global_store.units == 4);
    CHECK(k.counts.shared_load.requests == 0);
    CHECK(k.dram_sectors == c.sectors + 4);
    const auto& l = line_at(k, line_of("strided load"));
    CHECK(l.counts.global_load.requests == 1);
    CHECK(l.counts.global_load.units == c.sectors);
  }
}

TEST_CASE("cudasim profiler: a broadcast load is one sector" * kInstrumented) {
  Device<float> x(1), y(32);
  Profiling on;
  profiler_kernels::broadcast_load(x.p, y.p);
  const auto k = kernel_named("broadcast_load_kernel");
  CHECK(k.counts.global_load.requests == 1);
  CHECK(k.counts.global_load.units == 1);
  CHECK(k.counts.global_load.ideal_units == 1);
}

TEST_CASE("cudasim profiler: shared memory bank conflicts: a 32-way column read, none with a padded tile" * kInstrumented) {
  for (const bool padded : {false, true}) {
    CAPTURE(padded);
    Device<float> x(32 * 32), y(32 * 32);
    Profiling on;
    profiler_kernels::shared_transpose(x.p, y.p, padded);
    const auto k = kernel_named("shared_transpose_kernel");
    CHECK(k.threads == 1024);
    CHECK(k.barriers == 1);
    // 32 warps, one row each: a row store is free of conflicts
    CHECK(k.counts.shared_store.requests == 32);
    CHECK(k.counts.shared_store.units == 32);
    CHECK(k.counts.shared_load.requests == 32);
    CHECK(k.counts.shared_load.ideal_units == 32);
    CHECK(k.counts.shared_load.units == (padded ? 32u : 32u * 32u));
    CHECK(k.counts.global_load.units == 32 * 4);
    CHECK(k.counts.global_store.units == 32 * 4);
    const auto& column = line_at(k, line_of("column load"));
    CHECK(column.counts.shared_load.units == (padded ? 32u : 32u * 32u));
    const auto& row = line_at(k, line_of("row store"));
    CHECK(row.counts.shared_store.units == 32);
    CHECK(row.counts.global_load.units == 32 * 4);
    if (!padded) CHECK(cudasim::profile_report().find("32.00-way bank conflicts") != std::string::npos);
  }
}

TEST_CASE("cudasim profiler: 8-byte shared accesses are served a half-warp at a time" * kInstrumented) {
  Device<double> y(32);
  Profiling on;
  profiler_kernels::shared_double_stride2(y.p);
  const auto k = kernel_named("shared_double_stride2_kernel");
  // eight contiguous stores of 32 doubles: 2 wavefronts each, as ideal
  CHECK(k.counts.shared_store.requests == 8);
  CHECK(k.counts.shared_store.units == 16);
  CHECK(k.counts.shared_store.ideal_units == 16);
  // tile[2 * lane]: each half-warp meets every bank it uses twice
  const auto& stride2 = line_at(k, line_of("double stride 2")).counts.shared_load;
  CHECK(stride2.requests == 1);
  CHECK(stride2.units == 4);
  CHECK(stride2.ideal_units == 2);
  // half-warps served one after the other: 16 + 1 wavefronts
  const auto& halves = line_at(k, line_of("double halves")).counts.shared_load;
  CHECK(halves.requests == 1);
  CHECK(halves.units == 17);
  CHECK(halves.ideal_units == 2);
  CHECK(k.counts.global_store.units == 8);
}

TEST_CASE("cudasim profiler: 16-byte shared accesses are served a quarter-warp at a time" * kInstrumented) {
  Device<float> y(128);
  Profiling on;
  profiler_kernels::shared_float4(y.p);
  const auto k = kernel_named("shared_float4_kernel");
  const auto& store = line_at(k, line_of("float4 store")).counts.shared_store;
  CHECK(store.requests == 1);
  CHECK(store.units == 4);  // 512 bytes, 128 a wavefront
  CHECK(store.ideal_units == 4);
  const auto& contiguous = line_at(k, line_of("float4 contiguous")).counts.shared_load;
  CHECK(contiguous.units == 4);
  CHECK(contiguous.ideal_units == 4);
  const auto& stride2 = line_at(k, line_of("float4 stride 2")).counts.shared_load;
  CHECK(stride2.units == 8);
  CHECK(stride2.ideal_units == 4);
  // one float4 for all: still one wavefront per quarter-warp, and no conflict
  const auto& broadcast = line_at(k, line_of("float4 broadcast")).counts.shared_load;
  CHECK(broadcast.units == 4);
  CHECK(broadcast.ideal_units == 4);
  CHECK(k.counts.global_store.requests == 1);
  CHECK(k.counts.global_store.units == 16);  // 16 bytes a lane: 512 bytes, 16 sectors
}

TEST_CASE("cudasim profiler: a half-divergent warp: 16 active lanes, declared FLOPs, shuffle lanes" * kInstrumented) {
  const int threads = 256;
  Device<float> x(threads), y(threads);
  Profiling on;
  profiler_kernels::half_warp(x.p, y.p, threads);
  const auto k = kernel_named("half_warp_kernel");
  CHECK(k.blocks == 4);
  CHECK(k.counts.global_load.requests == 8);  // one per warp
  CHECK(k.counts.global_load.lanes == 8 * 16);
  CHECK(k.counts.global_load.units == 8 * 2);
  CHECK(k.counts.global_store.lanes == 8 * 16);
  CHECK(k.flops == 8 * 16);
  CHECK(k.warp_ops == 8);
  CHECK(k.warp_op_lanes == 8 * 16);
  CHECK(line_at(k, line_of("half-warp load")).counts.global_load.lanes == 8 * 16);
}

TEST_CASE("cudasim profiler: the thread's own stack is not memory traffic; the estimate of a copy is DRAM-bound" * kInstrumented) {
  const int blocks = 264;  // two per SM of an H100
  const size_t n = size_t(blocks) * 128;
  Device<float> x(n), y(n);
  Profiling on;
  profiler_kernels::copy_through_registers(x.p, y.p, blocks);
  const auto k = kernel_named("copy_through_registers_kernel");
  CHECK(k.counts.global_load.requests == uint64_t(blocks) * 4);
  CHECK(k.counts.global_store.requests == uint64_t(blocks) * 4);
  CHECK(k.counts.shared_load.requests + k.counts.shared_store.requests == 0);
  CHECK(k.dram_sectors == n * 4 * 2 / 32);
  const auto est = cudasim::estimate(k);
  REQUIRE(!est.empty());
  CHECK(est[0].gpu == "H100 SXM");
  CHECK(est[0].bound == "DRAM");
  CHECK(est[0].seconds == doctest::Approx(double(n) * 8 / 3350e9).epsilon(1e-6));
}

TEST_CASE("cudasim profiler: ldmatrix rows are 16-byte accesses served 8 a wavefront; rows on the same banks conflict" *
          kInstrumented) {
  Device<unsigned> out(32);
  for (const auto& c : {std::pair{8, 4}, std::pair{16, 8}, std::pair{64, 32}}) {
    CAPTURE(c.first);
    Profiling on;
    profiler_kernels::ldmatrix_rows(out.p, c.first);
    const auto k = kernel_named("ldmatrix_rows_kernel");
    CHECK(k.ldmatrix_instructions == 1);
    CHECK(k.ldmatrix_matrices == 4);
    CHECK(k.counts.shared_load.requests == 1);
    CHECK(k.counts.shared_load.units == uint64_t(c.second));  // wavefronts
    CHECK(k.counts.shared_load.ideal_units == 4);
    CHECK(cudasim::kernel_report(k, 0).find("ldmatrix 1 (4 8x8 matrices)") != std::string::npos);
  }
}

TEST_CASE("cudasim profiler: cp.async copies, their bytes, and the pipeline's stages in flight" * kInstrumented) {
  Device<float> x(8 * 32 * 4), y(8 * 32 * 4);
  for (int stages : {2, 3, 4}) {
    CAPTURE(stages);
    Profiling on;
    profiler_kernels::cp_async_stages(x.p, y.p, stages);
    const auto k = kernel_named("cp_async_stages_kernel");
    CHECK(k.async_copies == 8 * 32);
    CHECK(k.async_copy_bytes == 8 * 32 * 16);
    CHECK(k.async_groups_in_flight == unsigned(stages - 1));
    CHECK(k.async_warp_bytes_in_flight == uint64_t(32 * 16 * (stages - 1)));
    // The copies' global reads (16 bytes a lane: 16 sectors a request) and
    // shared writes, 8 tiles each.
    CHECK(k.counts.global_load.requests == 8);
    CHECK(k.counts.global_load.units == 8 * 16);
    CHECK(k.counts.shared_store.requests == 8);
    CHECK(cudasim::kernel_report(k, 0).find("up to " + std::to_string(stages - 1) + " groups (stages) in flight") !=
          std::string::npos);
  }
}

TEST_CASE("cudasim profiler: nothing is counted while profiling is off" * kInstrumented) {
  Device<float> x(32), y(32);
  cudasim::set_profiling(false);
  cudasim::reset_profile();
  profiler_kernels::strided_load(x.p, y.p, 1);
  CHECK(cudasim::profile().empty());
}

TEST_CASE("cudasim profiler: ptxas's reports give registers, spills and shared memory; occupancy follows") {
  const ember::testing::TempDir dir;
  std::filesystem::create_directories(dir.path / "cuda" / "kernels");
  {
    std::ofstream log(dir.file("cuda/kernels/x.ptxas.log"));
    log << "ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function '_ZN5ember4cuda40_GLOBAL__N__d7697607_8_fused_cu_af8d744415add_relu_kernelIfEEvPKT_S5_PS3_l' for 'sm_80'\n"
           "ptxas info    : Function properties for _ZN5ember4cuda40_GLOBAL__N__d7697607_8_fused_cu_af8d744415add_relu_kernelIfEEvPKT_S5_PS3_l\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem, 384 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function '_ZN5ember4cuda40_GLOBAL__N__d7697607_8_fused_cu_af8d744415add_relu_kernelIfEEvPKT_S5_PS3_l' for 'sm_90'\n"
           "ptxas info    : Function properties for _ZN5ember4cuda40_GLOBAL__N__d7697607_8_fused_cu_af8d744415add_relu_kernelIfEEvPKT_S5_PS3_l\n"
           "    24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Used 128 registers, used 1 barriers, 102400 bytes smem, 384 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function '_Z6plain2Pf' for 'sm_90'\n"
           "ptxas info    : Function properties for _Z6plain2Pf\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 32 registers, used 0 barriers, 384 bytes cmem[0]\n";
  }
  const auto reports = cudasim::read_ptxas_reports(dir.path.string());
  REQUIRE(reports.size() == 2);
  const auto k = reports.at("void ember::cuda::(anonymous namespace)::add_relu_kernel<float>(float const*, float const*, float*, long)");
  CHECK(k.found);
  CHECK(k.sm == 90);  // the newest architecture's report
  CHECK(k.registers == 128);
  CHECK(k.stack_bytes == 24);
  CHECK(k.spill_store_bytes == 16);
  CHECK(k.spill_load_bytes == 8);
  CHECK(k.static_shared_bytes == 102400);
  CHECK(k.source == "x.ptxas.log");
  // 128 registers x 128 threads: 16 K registers a block, 4 blocks of 64 K
  cudasim::KernelResources regs = k;
  regs.static_shared_bytes = 0;
  auto o = cudasim::occupancy(regs, 128, 0);
  CHECK(o.blocks_per_sm == 4);
  CHECK(o.fraction == doctest::Approx(0.25));
  CHECK(o.limit == "registers");
  // 100 KiB + 1 KiB reserved per block: 2 blocks of 228 KiB
  o = cudasim::occupancy(k, 64, 0);
  CHECK(o.blocks_per_sm == 2);
  CHECK(o.limit == "shared memory");
  const auto plain = reports.at("plain2(float*)");
  o = cudasim::occupancy(plain, 1024, 0);  // 32 registers: 2 blocks of 1024 threads fill the SM
  CHECK(o.blocks_per_sm == 2);
  CHECK(o.fraction == doctest::Approx(1.0));
  CHECK(o.limit == "registers");
  o = cudasim::occupancy(plain, 256, 48 * 1024);  // dynamic shared memory counts too
  CHECK(o.blocks_per_sm == 4);
  CHECK(o.limit == "shared memory");
  CHECK_FALSE(cudasim::occupancy(cudasim::KernelResources{}, 256, 0).blocks_per_sm);
}

TEST_CASE("cudasim profiler: the PTX instruction mix of a kernel: fma against mma, memory, barriers, integer div") {
  const ember::testing::TempDir dir;
  {
    std::ofstream ptx(dir.file("x.ptx"));
    ptx << "//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90\n\n"
           "\t// .globl\t_Z6plain2Pf\n"
           ".visible .entry _Z6plain2Pf(\n"
           "\t.param .u64 _Z6plain2Pf_param_0\n"
           ")\n{\n"
           "\t.reg .f32 \t%f<4>;\n\n"
           "\tld.global.f32 \t%f1, [%rd1];\n"
           "\tfma.rn.f32 \t%f2, %f1, %f1, %f1;\n"
           "\t@%p1 bra \t$L__BB0_2;\n\n"
           "\tdiv.u32 \t%r3, %r1, %r2;\n"
           "\trem.s64 \t%rd3, %rd1, %rd2;\n"
           "\tdiv.rn.f32 \t%f3, %f1, %f2;\n"
           "\tld.shared.f32 \t%f1, [%r1];\n"
           "\tst.shared.f32 \t[%r1], %f1;\n"
           "\tbar.sync \t0;\n"
           "\tshfl.sync.down.b32 \t%r1|%p2, %r2, 1, 31, -1;\n"
           "\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 \t{%f1, %f2, %f3, %f4}, {%r1}, {%r2}, {%f1};\n"
           "$L__BB0_2:\n"
           "\tst.global.f32 \t[%rd1], %f2;\n"
           "\tret;\n\n"
           "}\n"
           "\t// .globl\t_Z5otherv\n"
           ".visible .entry _Z5otherv()\n{\n\tret;\n}\n";
  }
  const auto mixes = cudasim::read_ptx_mix(dir.path.string());
  REQUIRE(mixes.size() == 2);
  const cudasim::PtxMix m = mixes.at("plain2(float*)");
  CHECK(m.found);
  CHECK(m.source == "x.ptx");
  CHECK(m.total == 13);
  CHECK(m.fma == 1);
  CHECK(m.mma == 1);
  CHECK(m.ld_global == 1);
  CHECK(m.st_global == 1);
  CHECK(m.ld_shared == 1);
  CHECK(m.st_shared == 1);
  CHECK(m.barriers == 1);
  CHECK(m.shuffles == 1);
  CHECK(m.int_div_rem == 2);  // div.u32 and rem.s64; div.rn.f32 is a float division
  CHECK(m.branches == 1);
  CHECK(mixes.at("other()").total == 1);
}
