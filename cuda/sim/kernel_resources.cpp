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
#include <cctype>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
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

// The integer just before position `at` of `line` (0 if none).
int number_before(const std::string& line, size_t at) {
  size_t b = at;
  while (b > 0 && line[b - 1] == ' ') --b;
  size_t a = b;
  while (a > 0 && std::isdigit(static_cast<unsigned char>(line[a - 1]))) --a;
  return a < b ? std::atoi(line.substr(a, b - a).c_str()) : 0;
}

// Plain string matching (no <regex>: g++ 12 warns inside it under the sanitizers).
void parse(const std::filesystem::path& file, std::map<std::string, KernelResources>& out) {
  std::ifstream in(file);
  static const std::string kEntry = "Compiling entry function '", kFor = "' for 'sm_";
  std::string line, name;
  KernelResources r;
  auto finish = [&] {
    if (name.empty()) return;
    auto it = out.find(name);
    if (it == out.end() || it->second.sm <= r.sm) out[name] = r;
    name.clear();
  };
  while (std::getline(in, line)) {
    if (const size_t e = line.find(kEntry); e != std::string::npos) {
      const size_t f = line.find(kFor, e + kEntry.size());
      if (f == std::string::npos) continue;
      finish();
      name = demangle(line.substr(e + kEntry.size(), f - e - kEntry.size()));
      r = KernelResources{};
      r.found = true;
      r.sm = std::atoi(line.c_str() + f + kFor.size());
      r.source = file.filename().string();
    } else if (name.empty()) {
      continue;
    } else if (const size_t frame = line.find(" bytes stack frame"); frame != std::string::npos) {
      r.stack_bytes = number_before(line, frame);
      if (const size_t st = line.find(" bytes spill stores"); st != std::string::npos)
        r.spill_store_bytes = number_before(line, st);
      if (const size_t ld = line.find(" bytes spill loads"); ld != std::string::npos)
        r.spill_load_bytes = number_before(line, ld);
    } else if (const size_t used = line.find(" registers"); used != std::string::npos && line.find("Used ") != std::string::npos) {
      r.registers = number_before(line, used);
      if (const size_t smem = line.find(" bytes smem"); smem != std::string::npos)
        r.static_shared_bytes = number_before(line, smem);
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

// ".visible .entry NAME(" (or ".weak .entry", ".entry") -> NAME; "" for other lines.
std::string entry_name(const std::string& line) {
  size_t i = 0;
  for (const char* prefix : {".visible ", ".weak "})
    if (line.compare(i, std::strlen(prefix), prefix) == 0) i += std::strlen(prefix);
  if (line.compare(i, 7, ".entry ") != 0) return {};
  i += 7;
  const size_t paren = line.find('(', i);
  if (paren == std::string::npos || paren == i) return {};
  return line.substr(i, paren - i);
}

void parse_ptx(const std::filesystem::path& file, std::map<std::string, PtxMix>& out) {
  std::ifstream in(file);
  std::string line, name;
  PtxMix mix;
  bool body = false;
  while (std::getline(in, line)) {
    if (name.empty()) {
      if (const std::string mangled = entry_name(line); !mangled.empty()) {
        name = demangle(mangled);
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
