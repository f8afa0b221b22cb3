// cuda/sim/kernel_resources.cpp — the static half of the profiler: what
// ptxas said about each kernel when nvcc built it (make keeps nvcc's
// -Xptxas -v report as build/ptx/<file>.ptxas.log), the theoretical
// occupancy that follows on the architecture, and the instruction mix of
// each kernel's PTX (build/ptx/<file>.ptx, the newest architecture's).
//
// A report looks like
//   ptxas info : Compiling entry function '_ZN5ember4cuda...' for 'sm_90'
//   ptxas info : Function properties for _ZN5ember4cuda...
//       0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info : Used 40 registers, used 1 barriers, 8448 bytes smem, ...
// nvcc mangles with the host compiler's (Itanium) rules, so a demangled
// entry name is the name the emulator reads from its own symbol table.
//
// Occupancy (CUDA's occupancy calculator, simplified): resident blocks per
// SM are limited by threads (2048 per SM), blocks (32), registers (64 K per
// SM, allocated per warp in units of 256) and shared memory (static plus
// dynamic, plus 1 KiB the driver reserves per block); occupancy is the
// resident warps over the SM's 64.
#define CUDASIM_RUNTIME_BUILD 1
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <string>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"

namespace cudasim {
namespace {

struct Arch {
  int sm;
  int shared_per_sm;  // bytes
};
constexpr Arch kArchs[] = {{80, 164 * 1024}, {86, 100 * 1024}, {89, 100 * 1024}, {90, 228 * 1024}};

int shared_per_sm(int sm) {
  int best = 228 * 1024;
  for (const Arch& a : kArchs)
    if (a.sm <= sm) best = a.shared_per_sm;
  return best;
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : mangled;
  std::free(d);
  return out;
}

std::string default_directory() {
  if (const char* d = std::getenv("CUDASIM_PTXAS_DIR"); d && *d) return d;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("build/ptx") : (exe.parent_path() / "ptx").string();
}

struct Table {
  std::mutex mu;
  bool loaded = false;
  std::map<std::string, KernelResources> by_name;  // demangled name -> resources on the newest architecture
};
Table& table() {
  static Table* t = new Table;
  return *t;
}

void parse(const std::filesystem::path& file, std::map<std::string, KernelResources>& out) {
  std::ifstream in(file);
  static const std::regex entry(R"(Compiling entry function '([^']+)' for 'sm_(\d+)a?')");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  std::string line, name;
  int sm = 0;
  KernelResources r;
  std::smatch m;
  auto finish = [&] {
    if (name.empty()) return;
    auto it = out.find(name);
    if (it == out.end() || it->second.sm <= r.sm) out[name] = r;
    name.clear();
  };
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry)) {
      finish();
      name = demangle(m[1]);
      sm = std::atoi(m[2].str().c_str());
      r = KernelResources{};
      r.found = true;
      r.sm = sm;
      r.source = file.filename().string();
    } else if (!name.empty() && std::regex_search(line, m, frame)) {
      r.stack_bytes = std::atoi(m[1].str().c_str());
      r.spill_store_bytes = std::atoi(m[2].str().c_str());
      r.spill_load_bytes = std::atoi(m[3].str().c_str());
    } else if (!name.empty() && std::regex_search(line, m, used)) {
      r.registers = std::atoi(m[1].str().c_str());
      if (std::regex_search(line, m, smem)) r.static_shared_bytes = std::atoi(m[1].str().c_str());
      finish();
    }
  }
  finish();
}

struct MixTable {
  std::mutex mu;
  bool loaded = false;
  std::map<std::string, PtxMix> by_name;
};
MixTable& mix_table() {
  static MixTable* t = new MixTable;
  return *t;
}

void count_instruction(const std::string& line, PtxMix& m) {
  size_t i = line.find_first_not_of(" \t");
  if (i == std::string::npos) return;
  const char c = line[i];
  if (c == '.' || c == '$' || c == '/' || c == '{' || c == '}' || c == ')' || c == '(') return;
  if (c == '@') {  // a predicate: the opcode follows it
    i = line.find_first_of(" \t", i);
    if (i == std::string::npos) return;
    i = line.find_first_not_of(" \t", i);
    if (i == std::string::npos) return;
  }
  const size_t end = line.find_first_of(" \t;", i);
  const std::string op = line.substr(i, end == std::string::npos ? std::string::npos : end - i);
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  ++m.total;
  if (starts("fma.")) ++m.fma;
  else if (starts("mma.") || starts("wmma.") || starts("wgmma.")) ++m.mma;
  else if (starts("ld.global") || starts("ldu.global")) ++m.ld_global;
  else if (starts("st.global")) ++m.st_global;
  else if (starts("ld.shared")) ++m.ld_shared;
  else if (starts("st.shared")) ++m.st_shared;
  else if (starts("bar.") || starts("barrier.")) ++m.barriers;
  else if (starts("shfl.")) ++m.shuffles;
  else if ((starts("div.") || starts("rem.")) && op.find(".f") == std::string::npos) ++m.int_div_rem;
  else if (starts("bra")) ++m.branches;
}

void parse_ptx(const std::filesystem::path& file, std::map<std::string, PtxMix>& out) {
  std::ifstream in(file);
  static const std::regex entry(R"(^(?:\.visible\s+|\.weak\s+)?\.entry\s+([A-Za-z0-9_$]+)\()");
  std::string line, name;
  PtxMix mix;
  bool body = false;
  std::smatch m;
  while (std::getline(in, line)) {
    if (name.empty()) {
      if (line.find(".entry") != std::string::npos && std::regex_search(line, m, entry)) {
        name = demangle(m[1]);
        mix = PtxMix{};
        mix.found = true;
        mix.source = file.filename().string();
        body = false;
      }
      continue;
    }
    if (!body) {
      body = line.rfind("{", 0) == 0;
      continue;
    }
    if (line.rfind("}", 0) == 0) {  // the entry's closing brace, at the start of a line
      out[name] = mix;
      name.clear();
      continue;
    }
    count_instruction(line, mix);
  }
}

}  // namespace

std::map<std::string, PtxMix> read_ptx_mix(const std::string& directory) {
  std::map<std::string, PtxMix> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(directory, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->path().extension() == ".ptx") parse_ptx(it->path(), out);
  return out;
}

PtxMix ptx_mix(const std::string& name) {
  MixTable& t = mix_table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!t.loaded) {
    t.loaded = true;
    t.by_name = read_ptx_mix(default_directory());
  }
  const auto it = t.by_name.find(name);
  return it == t.by_name.end() ? PtxMix{} : it->second;
}

std::map<std::string, KernelResources> read_ptxas_reports(const std::string& directory) {
  std::map<std::string, KernelResources> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(directory, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    if (it->path().string().ends_with(".ptxas.log")) parse(it->path(), out);
  return out;
}

KernelResources kernel_resources(const std::string& name) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!t.loaded) {
    t.loaded = true;
    t.by_name = read_ptxas_reports(default_directory());
  }
  const auto it = t.by_name.find(name);
  return it == t.by_name.end() ? KernelResources{} : it->second;
}

Occupancy occupancy(const KernelResources& r, int threads_per_block, int dynamic_shared_bytes) {
  Occupancy o;
  if (!r.found || threads_per_block <= 0) return o;
  const int warps = (threads_per_block + 31) / 32;
  const int by_threads = 2048 / (warps * 32);
  const int by_blocks = 32;
  const int regs_per_warp = ((std::max(r.registers, 1) * 32 + 255) / 256) * 256;
  const int by_registers = 65536 / (regs_per_warp * warps);
  const int shared = r.static_shared_bytes + dynamic_shared_bytes + 1024;
  const int by_shared = shared_per_sm(r.sm) / shared;
  o.blocks_per_sm = std::min({by_threads, by_blocks, by_registers, by_shared});
  o.limit = o.blocks_per_sm == by_registers   ? "registers"
            : o.blocks_per_sm == by_shared    ? "shared memory"
            : o.blocks_per_sm == by_threads   ? "threads"
                                              : "blocks";
  o.fraction = double(o.blocks_per_sm * warps) / 64.0;
  return o;
}

}  // namespace cudasim
