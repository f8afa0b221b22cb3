// tests/cuda/test_cuda_ptx.cpp — what the compiler made of the hot CUDA kernels,
// read from the PTX the build keeps next to the binary (build/ptx/<file>.ptx,
// the newest CUDA_ARCH; see the Makefile's nvcc rule): no integer division or
// remainder (div./rem., 32 or 64 bits) inside any loop of any kernel of
// cuda/kernels/ instantiated for 32-bit indices (every tensor under 2^31
// elements) or without an index type, but batch norm's per-channel kernels.
// Index decodes divide by multiplication (cuda/kernels/fast_divmod.cuh); the
// 64-bit instantiations, for larger tensors, still divide. A loop is a
// backward branch: the instructions from a label to a later `bra` that jumps
// back to it. Skipped in builds without nvcc.
#include <cxxabi.h>
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/skip.h"

namespace {

namespace fs = std::filesystem;

// build/ptx beside the running test binary.
fs::path ptx_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path("build/ptx") : exe.parent_path() / "ptx";
}
// The build made ptx/ when it compiled CUDA: from then on a missing file is a failure, not a skip.
bool ptx_present() { return fs::is_directory(ptx_dir()); }
constexpr ember::testing::needs kNeedsPtx{"no PTX next to this test binary (a build without nvcc)", ptx_present};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && text ? text : mangled;
  std::free(text);
  return out;
}

struct Kernel {
  std::string name;          // demangled
  int divisions_in_loops = 0;
  std::string first;         // the first such instruction
  int mma = 0;               // tensor-core instructions (wmma.mma.sync, mma.sync)
  int mma_tf32 = 0, cvt_tf32 = 0;  // mma.sync on TF32 inputs; f32 -> TF32 rounding (cvt.rna.tf32.f32)
  int ldmatrix = 0, cp_async = 0, cp_async_wait = 0;
  int divisions = 0;         // div/rem anywhere in the kernel
};

// Every .entry of a PTX file with the div/rem instructions inside its loops.
std::vector<Kernel> kernels_of(const std::string& ptx) {
  static const std::regex entry(R"(^(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z0-9_$]+)\()");
  static const std::regex label(R"(^\s*(\$?[A-Za-z0-9_$]+):\s*$)");
  static const std::regex branch(R"(\bbra(?:\.uni)?\s+(\$?[A-Za-z0-9_$]+)\s*;)");
  static const std::regex division(R"(\b(?:div|rem)\.(?:full\.)?[su](?:32|64)\b)");
  std::vector<Kernel> out;
  std::vector<std::string> body;
  auto finish = [&] {
    if (out.empty()) return;
    std::map<std::string, size_t> labels;
    std::smatch m;
    // (std::regex only on the lines a plain find picks: PTX files run to 10^5 lines.)
    for (size_t i = 0; i < body.size(); ++i)
      if (!body[i].empty() && body[i].back() == ':' && std::regex_match(body[i], m, label)) labels[m[1]] = i;
    std::vector<std::pair<size_t, size_t>> loops;
    for (size_t i = 0; i < body.size(); ++i)
      if (body[i].find("bra") != std::string::npos && std::regex_search(body[i], m, branch))
        if (auto it = labels.find(m[1]); it != labels.end() && it->second < i) loops.emplace_back(it->second, i);
    for (const std::string& line : body) {
      Kernel& k = out.back();
      k.mma += line.find("mma.sync") != std::string::npos;
      k.mma_tf32 += line.find("mma.sync") != std::string::npos && line.find(".tf32.tf32.") != std::string::npos;
      k.cvt_tf32 += line.find("cvt.rna.tf32.f32") != std::string::npos;
      k.ldmatrix += line.find("ldmatrix.sync") != std::string::npos;
      k.cp_async += line.find("cp.async.c") != std::string::npos;  // cp.async.ca / cp.async.cg
      k.cp_async_wait += line.find("cp.async.wait_group") != std::string::npos;
      k.divisions += (line.find("div.") != std::string::npos || line.find("rem.") != std::string::npos) &&
                     std::regex_search(line, division);
    }
    for (size_t i = 0; i < body.size(); ++i) {
      const std::string& line = body[i];
      if (line.find("div.") == std::string::npos && line.find("rem.") == std::string::npos) continue;
      if (!std::regex_search(line, division)) continue;
      for (const auto& [from, to] : loops)
        if (from <= i && i <= to) {
          if (out.back().divisions_in_loops++ == 0) out.back().first = body[i];
          break;
        }
    }
    body.clear();
  };
  std::istringstream in(ptx);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.find(".entry") != std::string::npos && std::regex_search(line, m, entry)) {
      finish();
      Kernel k;
      k.name = demangle(m[1]);
      out.push_back(k);
    } else if (!out.empty()) {
      body.push_back(line);
    }
  }
  finish();
  return out;
}

// The template arguments of a demangled kernel name (before its parameter list).
std::string template_arguments(const std::string& name) {
  const size_t open = name.find('<'), close = name.find(">(");
  return open == std::string::npos || close == std::string::npos ? "" : name.substr(open, close - open + 1);
}
bool has_64bit_indices(const std::string& name) {
  return std::regex_search(template_arguments(name), std::regex(R"(\blong\b)"));
}

}  // namespace

TEST_CASE("cuda ptx: no kernel divides inside a loop (32-bit indices); the 64-bit ones are found dividing" *
          kNeedsPtx) {
  const fs::path dir = ptx_dir() / "cuda/kernels";
  REQUIRE_MESSAGE(fs::exists(dir / "conv.ptx"), (dir / "conv.ptx").string() << " is missing: the build kept no PTX");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".ptx") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  CHECK(files.size() >= 10);  // one per cuda/kernels/*.cu
  // Batch norm's per-channel coefficients kernel (one thread per channel) may divide.
  const std::vector<std::string> per_channel = {"eval_coef_kernel"};
  int checked = 0, wide_dividing = 0;
  for (const fs::path& path : files) {
    CAPTURE(path.string());
    const std::vector<Kernel> kernels = kernels_of(read(path));
    // conv_batch_norm.cu only calls the kernels of conv_mma.cu and batch_norm.cu.
    if (path.filename() != "conv_batch_norm.ptx") CHECK(!kernels.empty());
    for (const Kernel& k : kernels) {
      bool exempt = false;
      for (const std::string& name : per_channel) exempt = exempt || k.name.find(name) != std::string::npos;
      if (exempt) continue;
      if (has_64bit_indices(k.name)) {
        wide_dividing += k.divisions_in_loops > 0;
        continue;
      }
      ++checked;
      if (k.divisions_in_loops > 0)
        FAIL_CHECK(path.filename().string() << ": " << k.name.substr(0, 200) << ": " << k.divisions_in_loops
                                            << " div/rem inside loops, e.g. '" << k.first << "'");
    }
  }
  MESSAGE(checked << " kernels with 32-bit (or no) indices checked in " << files.size() << " files; "
                  << wide_dividing << " 64-bit-index kernels divide in their loops");
  CHECK(checked >= 200);
  // The reader finds divisions where they are: the 64-bit instantiations decode with `/` and `%`.
  CHECK(wide_dividing >= 10);
}

TEST_CASE("cuda ptx: f16 and bf16 GEMMs and convolutions multiply on the tensor cores, f32 on the FP32 pipes" *
          kNeedsPtx) {
  for (const char* file : {"gemm.ptx", "conv.ptx"}) {
    CAPTURE(file);
    const fs::path path = ptx_dir() / "cuda/kernels" / file;
    REQUIRE_MESSAGE(fs::exists(path), path.string() << " is missing: the build kept no PTX");
    int tensor_half = 0, tensor_bf16 = 0, fp32 = 0;
    for (const Kernel& k : kernels_of(read(path))) {
      const std::string args = template_arguments(k.name);
      if (k.name.find("gemm_tensor_kernel") != std::string::npos) {
        CAPTURE(k.name.substr(0, 200));
        CHECK(k.mma > 0);
        tensor_half += args.rfind("<__half,", 0) == 0;
        tensor_bf16 += args.rfind("<__nv_bfloat16,", 0) == 0;
      } else if (k.name.find("gemm_tiled_kernel<float,") != std::string::npos) {
        CHECK(k.mma == 0);
        ++fp32;
      }
    }
    CHECK(tensor_half > 0);
    CHECK(tensor_bf16 > 0);
    CHECK(fp32 > 0);  // f32 (and 16-bit with the tensor cores switched off)
  }
}

TEST_CASE("cuda ptx: the mma.sync convolutions and GEMM are mma.sync fed by ldmatrix and cp.async, and never divide" *
          kNeedsPtx) {
  // 16-bit kernels multiply f16/bf16 fragments that ldmatrix loaded; the f32
  // ones multiply TF32 (m16n8k8) and round every input with cvt.rna (their
  // MN-major tiles are read with plain shared loads: no ldmatrix needed).
  const struct {
    const char* file;
    const char* kernel;
    int at_least, tf32_at_least;  // instantiations, of which f32 on TF32
  } files[] = {
      // three passes (a 16-bit filter gradient storing 16-bit or f32 slices), f16/bf16/f32, two tiles
      {"conv_mma.ptx", "conv_mma_", 22, 6},
      {"gemm_mma.ptx", "gemm_mma_kernel", 24, 8},  // four transposes, f16/bf16/f32, two tiles
  };
  for (const auto& f : files) {
    CAPTURE(f.file);
    const fs::path path = ptx_dir() / "cuda/kernels" / f.file;
    REQUIRE_MESSAGE(fs::exists(path), path.string() << " is missing: the build kept no PTX");
    int kernels = 0, tf32_kernels = 0;
    for (const Kernel& k : kernels_of(read(path))) {
      if (k.name.find(f.kernel) == std::string::npos) continue;  // not a helper (the filter gradient's slice sum)
      CAPTURE(k.name.substr(0, 200));
      ++kernels;
      const bool tf32 = k.name.find("_kernel<float,") != std::string::npos;
      tf32_kernels += tf32;
      CHECK(k.mma > 0);
      if (tf32) {
        CHECK(k.mma_tf32 == k.mma);
        CHECK(k.cvt_tf32 > 0);
      } else {
        CHECK(k.mma_tf32 == 0);
        CHECK(k.ldmatrix > 0);
      }
      CHECK(k.cp_async > 0);
      CHECK(k.cp_async_wait > 0);
      CHECK(k.divisions == 0);
    }
    CHECK(kernels >= f.at_least);
    CHECK(tf32_kernels >= f.tf32_at_least);
  }
}
