// cuda/sim/profile_report.cpp — what the profiler's counts (profiler.cpp)
// become for a reader: source lines for the instrumented instructions (by
// addr2line, once per report), the per-kernel report CUDASIM_PROFILE=1
// prints at exit, and a roofline estimate of each launch on a few GPUs.
//
// The estimate is a bound, not a prediction: the time of the busiest of
// four units if everything else overlapped perfectly, with every SM the
// launch's blocks can fill busy all the time:
//   DRAM       distinct 32-byte sectors the launch touched / DRAM bandwidth
//              (each byte fetched once: L2 catches every re-read)
//   L1         sectors requested / (4 sectors per clock per SM)
//   shared     wavefronts / (1 per clock per SM)
//   FP32       declared FLOPs (EMBER_PROFILE_FLOPS) / the FP32 FMA peak
//   tensor     wmma::mma_sync FLOPs / the dense f16-in, f32-accumulate tensor peak
// Latency, occupancy, instruction issue and launch overhead
// are not modelled; a kernel far from its bound is latency- or issue-bound.
#define CUDASIM_RUNTIME_BUILD 1
#include <dlfcn.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"
#include "cuda/sim/profiler_internal.h"

namespace cudasim::detail {
namespace {

// Public figures (vendor datasheets, boost clocks): FP32 without tensor cores; tensor: dense
// f16 or bf16 inputs with f32 accumulation (GeForce parts run that at half their f16-accumulate rate).
struct Gpu {
  const char* name;
  int sms;
  double clock_ghz;
  double dram_gb_s;
  double fp32_tflops;
  double tensor_tflops;
};
constexpr Gpu kGpus[] = {
    {"H100 SXM", 132, 1.98, 3350, 66.9, 989.4},
    {"H200", 132, 1.98, 4800, 66.9, 989.4},
    {"A100 SXM", 108, 1.41, 2039, 19.5, 312},
    {"RTX 4060 Laptop", 24, 2.37, 256, 14.6, 29.1},
};

std::string trim_discriminator(std::string s) {
  if (const size_t p = s.find(" (discriminator"); p != std::string::npos) s.resize(p);
  return s;
}

// "void ns::(anonymous namespace)::f<int, 3>(float*, int)" -> "ns::f<...>"
std::string short_function(std::string f) {
  for (size_t p; (p = f.find("(anonymous namespace)::")) != std::string::npos;) f.erase(p, 23);
  for (size_t p; (p = f.find("operator()")) != std::string::npos;) f.replace(p, 10, "operator@");
  std::string out;
  int depth = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '(' && depth == 0) break;
    if (c == '<') {
      if (depth++ == 0) out += "<...>";
      continue;
    }
    if (c == '>') {
      if (depth > 0) --depth;
      continue;
    }
    if (depth == 0) out += c;
  }
  if (const size_t space = out.rfind(' '); space != std::string::npos) out.erase(0, space + 1);  // a return type
  for (size_t p; (p = out.find("operator@")) != std::string::npos;) out.replace(p, 9, "operator()");
  return out;
}

// A path under the working directory, relative to it (DWARF names a
// source by its compilation directory and the name it was compiled as).
std::string relative_path(std::string path) {
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) return path;
  const std::string dir = std::string(cwd) + "/";
  if (path.rfind(dir, 0) == 0) path.erase(0, dir.size());
  while (path.rfind("./", 0) == 0) path.erase(0, 2);
  return path;
}

bool is_position_independent(const char* path) {
  FILE* f = std::fopen(path, "rb");
  if (!f) return true;
  Elf64_Ehdr eh{};
  const bool ok = std::fread(&eh, sizeof eh, 1, f) == 1;
  std::fclose(f);
  return !ok || eh.e_type != ET_EXEC;
}

// Runs addr2line on `file` for the file addresses in `addrs`; returns, per
// address, "file:line (function)": the innermost inlined frame outside
// /usr/ (the project's own code, not libstdc++'s or CUDA's headers) and
// outside cuda/common.cuh (its access helpers, load_vec4 and the like,
// belong to the line that calls them) if there is one, else the innermost;
// paths under the working directory are made relative to it.
std::vector<std::string> addr2line(const std::string& file, const std::vector<uintptr_t>& addrs) {
  std::vector<std::string> out(addrs.size());
  char list[] = "/tmp/cudasim_profile_XXXXXX";
  const int fd = mkstemp(list);
  if (fd < 0) return out;
  std::string text;
  for (uintptr_t a : addrs) text += fmt("0x%" PRIxPTR "\n", a);
  const bool written = write(fd, text.data(), text.size()) == ssize_t(text.size());
  close(fd);
  FILE* pipe = written ? popen(("addr2line -a -C -f -i -e '" + file + "' < " + list + " 2>/dev/null").c_str(), "r")
                       : nullptr;
  if (pipe) {
    std::vector<std::pair<std::string, std::string>> frames;  // (function, location) of one address
    long current = -1;
    auto finish = [&] {
      if (current < 0 || current >= long(out.size()) || frames.empty()) return;
      const auto* pick = &frames.front();
      for (const auto& fr : frames)
        if (!fr.second.empty() && fr.second.rfind("/usr/", 0) != 0 && fr.second[0] != '?' &&
            fr.second.rfind("cuda/common.cuh", 0) != 0) {
          pick = &fr;
          break;
        }
      if (pick->second.rfind("??", 0) != 0) out[size_t(current)] = pick->second + " (" + short_function(pick->first) + ")";
    };
    char buf[8192];
    std::string function;
    bool want_location = false;
    while (std::fgets(buf, sizeof buf, pipe)) {
      std::string line(buf);
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      if (!want_location && line.rfind("0x", 0) == 0) {
        finish();
        frames.clear();
        ++current;
        continue;
      }
      if (!want_location) {
        function = line;
        want_location = true;
      } else {
        frames.emplace_back(function, relative_path(trim_discriminator(line)));
        want_location = false;
      }
    }
    finish();
    pclose(pipe);
  }
  unlink(list);
  return out;
}

// Source lines for instrumented instructions (return addresses).
std::unordered_map<uintptr_t, std::string> resolve(const std::vector<uintptr_t>& pcs) {
  std::unordered_map<uintptr_t, std::string> where;
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&resolve), &self);
  // The program's own path (addr2line's /proc/self/exe would be addr2line).
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  const std::string program = n > 0 ? std::string(path, size_t(n)) : std::string("/proc/self/exe");
  std::map<std::string, std::pair<std::vector<uintptr_t>, std::vector<uintptr_t>>> by_file;  // pcs, file addresses
  for (uintptr_t pc : pcs) {
    where[pc] = fmt("0x%" PRIxPTR, pc);
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(pc - 1), &info) || !info.dli_fname) continue;
    const std::string file = info.dli_fbase == self.dli_fbase ? program : info.dli_fname;
    const uintptr_t at = is_position_independent(file.c_str()) ? pc - 1 - uintptr_t(info.dli_fbase) : pc - 1;
    auto& [list, addrs] = by_file[file];
    list.push_back(pc);
    addrs.push_back(at);
  }
  for (auto& [file, lists] : by_file) {
    const std::vector<std::string> names = addr2line(file, lists.second);
    for (size_t i = 0; i < names.size(); ++i)
      if (!names[i].empty()) where[lists.first[i]] = names[i];
  }
  return where;
}

uint64_t units_of(const MemoryCounts& m) {
  return m.global_load.units + m.global_store.units + m.shared_load.units + m.shared_store.units;
}

std::string number(double v) {
  const char* suffix[] = {"", " K", " M", " G", " T"};
  int i = 0;
  while (v >= 1000 && i < 4) {
    v /= 1000;
    ++i;
  }
  return i == 0 ? fmt("%.0f", v) : fmt("%.3g%s", v, suffix[i]);
}

std::string seconds(double s) {
  if (s < 1e-3) return fmt("%.3g us", s * 1e6);
  if (s < 1) return fmt("%.3g ms", s * 1e3);
  return fmt("%.3g s", s);
}

std::string access_line(const char* what, const AccessCounts& c, bool global) {
  if (c.requests == 0) return {};
  const double per = double(c.units) / double(c.requests), ideal = double(c.ideal_units) / double(c.requests);
  std::string tail;
  if (global)
    tail = fmt("%.2f sectors/request (ideal %.2f): %.0f%% of the fetched bytes used", per, ideal,
               100.0 * double(c.ideal_units) / double(c.units));
  else
    tail = fmt("%.2f wavefronts/request (ideal %.2f): %s", per, ideal,
               c.units == c.ideal_units ? "no bank conflicts"
                                        : fmt("%.2f-way bank conflicts", double(c.units) / double(c.ideal_units)).c_str());
  return fmt("    %-14s %10s requests, %4.1f lanes, %s\n", what, number(double(c.requests)).c_str(),
             double(c.lanes) / double(c.requests), tail.c_str());
}

}  // namespace

// The bound of one launch (averages over the kernel's launches) on `gpu`;
// *unit says which unit binds.
double estimate_seconds(const KernelProfile& k, int gpu_index, const char** unit) {
  const Gpu& g = kGpus[gpu_index];
  const double launches = double(std::max<uint64_t>(1, k.launches));
  const double blocks = double(k.blocks) / launches;
  const double sms = std::max(1.0, std::min(double(g.sms), blocks));
  const double hz = g.clock_ghz * 1e9;
  const MemoryCounts& m = k.counts;
  const double t_dram = double(k.dram_sectors) / launches * 32 / (g.dram_gb_s * 1e9) * (double(g.sms) / sms);
  const double t_l1 = double(m.global_load.units + m.global_store.units) / launches / (4 * sms * hz);
  const double t_shared = double(m.shared_load.units + m.shared_store.units) / launches / (sms * hz);
  const double t_fp32 = double(k.flops) / launches / (g.fp32_tflops * 1e12 * sms / g.sms);
  double best = t_dram;
  *unit = "DRAM";
  if (t_l1 > best) best = t_l1, *unit = "L1";
  if (t_shared > best) best = t_shared, *unit = "shared";
  if (t_fp32 > best) best = t_fp32, *unit = "FP32";
  const double t_tensor = double(k.tensor_flops) / launches / (g.tensor_tflops * 1e12 * sms / g.sms);
  if (t_tensor > best) best = t_tensor, *unit = "tensor";
  return best;
}

}  // namespace cudasim::detail

namespace cudasim {

std::vector<Estimate> estimate(const KernelProfile& kernel) {
  std::vector<Estimate> out;
  for (int g = 0; g < int(std::size(detail::kGpus)); ++g) {
    const char* unit = "";
    const double t = detail::estimate_seconds(kernel, g, &unit);
    out.push_back(Estimate{detail::kGpus[g].name, t, unit});
  }
  return out;
}

std::vector<KernelProfile> profile() {
  const std::vector<detail::RecordedKernel> rec = detail::recorded_kernels();
  std::vector<uintptr_t> pcs;
  for (const auto& k : rec)
    for (const auto& [pc, counts] : k.by_pc) pcs.push_back(pc);
  const auto where = detail::resolve(pcs);
  std::vector<KernelProfile> out;
  for (const auto& k : rec) {
    KernelProfile p;
    p.name = detail::function_name(k.kernel);
    p.launches = k.launches;
    p.blocks = k.blocks;
    p.threads = k.threads;
    p.barriers = k.barriers;
    p.warp_ops = k.warp_ops;
    p.warp_op_lanes = k.warp_op_lanes;
    p.dram_sectors = k.dram_sectors;
    p.flops = k.flops;
    p.tensor_flops = k.tensor_flops;
    p.mma_syncs = k.mma_syncs;
    p.ldmatrix_instructions = k.ldmatrix_instructions;
    p.ldmatrix_matrices = k.ldmatrix_matrices;
    p.async_copies = k.async_copies;
    p.async_copy_bytes = k.async_copy_bytes;
    p.async_groups_in_flight = k.async_groups_in_flight;
    p.async_warp_bytes_in_flight = k.async_warp_bytes_in_flight;
    p.threads_per_block = k.threads_per_block;
    p.dynamic_shared_bytes = k.dynamic_shared_bytes;
    p.counts = k.counts;
    std::map<std::string, MemoryCounts> lines;
    for (const auto& [pc, counts] : k.by_pc) lines[where.at(pc)] += counts;
    for (auto& [w, counts] : lines) p.lines.push_back(LineProfile{w, counts});
    std::stable_sort(p.lines.begin(), p.lines.end(), [](const LineProfile& a, const LineProfile& b) {
      return detail::units_of(a.counts) > detail::units_of(b.counts);
    });
    out.push_back(std::move(p));
  }
  return out;
}

std::string resources_line(const KernelProfile& k) {
  using detail::fmt;
  const KernelResources res = kernel_resources(k.name);
  if (!res.found) return "    ptxas: no report for this kernel (build/ptx/*.ptxas.log: the CUDA build makes them)\n";
  const Occupancy o = occupancy(res, int(k.threads_per_block), int(k.dynamic_shared_bytes));
  return fmt("    ptxas sm_%d: %d registers, %d bytes stack, %d/%d bytes spilled (stores/loads), %d bytes static "
             "shared%s; %u threads per block: occupancy %.0f%% (%d blocks per SM, limited by %s)\n",
             res.sm, res.registers, res.stack_bytes, res.spill_store_bytes, res.spill_load_bytes,
             res.static_shared_bytes,
             k.dynamic_shared_bytes ? fmt(" + %zu dynamic", k.dynamic_shared_bytes).c_str() : "",
             k.threads_per_block, o.fraction * 100, o.blocks_per_sm, o.limit.c_str());
}

std::string ptx_mix_line(const KernelProfile& k) {
  const PtxMix m = ptx_mix(k.name);
  if (!m.found) return "    PTX: none for this kernel (build/ptx/*.ptx: the CUDA build keeps them)\n";
  return detail::fmt("    PTX: %d instructions: %d fma, %d mma, %d ld.global, %d st.global, %d ld.shared, %d st.shared, "
                     "%d bar, %d shfl, %d integer div/rem, %d branches\n",
                     m.total, m.fma, m.mma, m.ld_global, m.st_global, m.ld_shared, m.st_shared, m.barriers, m.shuffles,
                     m.int_div_rem, m.branches);
}

std::string kernel_report(const KernelProfile& k, int max_lines) {
  using detail::fmt;
  std::string r;
  r += fmt("    %s launch(es), %s blocks, %s threads, %s barriers, %s warp operations", detail::number(double(k.launches)).c_str(),
           detail::number(double(k.blocks)).c_str(), detail::number(double(k.threads)).c_str(), detail::number(double(k.barriers)).c_str(),
           detail::number(double(k.warp_ops)).c_str());
  if (k.warp_ops) r += fmt(" (%.1f lanes)", double(k.warp_op_lanes) / double(k.warp_ops));
  r += "\n";
  r += resources_line(k);
  r += ptx_mix_line(k);
  r += detail::access_line("global loads", k.counts.global_load, true);
  r += detail::access_line("global stores", k.counts.global_store, true);
  r += detail::access_line("shared loads", k.counts.shared_load, false);
  r += detail::access_line("shared stores", k.counts.shared_store, false);
  r += fmt("    DRAM (distinct sectors) %sB, FLOPs %s%s", detail::number(double(k.dram_sectors) * 32).c_str(),
           detail::number(double(k.flops)).c_str(), k.flops || k.tensor_flops ? "" : " (none declared)");
  r += k.tensor_flops ? fmt(", tensor-core FLOPs %s\n", detail::number(double(k.tensor_flops)).c_str()) : "\n";
  if (k.mma_syncs || k.ldmatrix_instructions)
    r += fmt("    mma.sync %s, ldmatrix %s (%s 8x8 matrices)\n", detail::number(double(k.mma_syncs)).c_str(),
             detail::number(double(k.ldmatrix_instructions)).c_str(), detail::number(double(k.ldmatrix_matrices)).c_str());
  if (k.async_copies)
    r += fmt("    cp.async %s copies, %sB; pipeline: up to %u groups (stages) in flight per thread, %sB per warp\n",
             detail::number(double(k.async_copies)).c_str(), detail::number(double(k.async_copy_bytes)).c_str(),
             k.async_groups_in_flight, detail::number(double(k.async_warp_bytes_in_flight)).c_str());
  const bool counted = k.dram_sectors || k.flops || k.tensor_flops || detail::units_of(k.counts);
  r += counted ? "    estimate per launch:" : "    estimate: nothing counted (not instrumented?)";
  bool first = true;
  for (const Estimate& e : counted ? estimate(k) : std::vector<Estimate>{}) {
    r += fmt("%s %s %s (%s)", first ? "" : ",", e.gpu.c_str(), detail::seconds(e.seconds).c_str(), e.bound.c_str());
    first = false;
  }
  r += "\n";
  int shown = 0;
  for (const LineProfile& l : k.lines) {
    if (shown++ == max_lines) break;
    const MemoryCounts& m = l.counts;
    const struct {
      const char* what;
      const AccessCounts* c;
      const char* unit;
    } rows[] = {{"global load", &m.global_load, "sectors"},
                {"global store", &m.global_store, "sectors"},
                {"shared load", &m.shared_load, "wavefronts"},
                {"shared store", &m.shared_store, "wavefronts"}};
    for (const auto& row : rows)
      if (row.c->requests)
        r += fmt("      %-13s %8s requests %5.2f %s/request (ideal %.2f)  %s\n", row.what,
                 detail::number(double(row.c->requests)).c_str(),
                 double(row.c->units) / double(row.c->requests), row.unit,
                 double(row.c->ideal_units) / double(row.c->requests), l.where.c_str());
  }
  return r;
}

std::string profile_report() {
  using detail::fmt;
  const std::vector<KernelProfile> kernels = profile();
  std::string r = fmt("cudasim profile: %zu kernels%s\n", kernels.size(),
                      profiler_instrumented() ? ""
                                              : " (no instrumented code is linked: memory accesses are not counted; "
                                                "link build/libember_cudasim_profile.a)");
  int i = 0;
  for (const KernelProfile& k : kernels) {
    r += fmt("[%d] %s\n", ++i, k.name.empty() ? "(unnamed kernel)" : k.name.c_str());
    r += kernel_report(k, 8);
  }
  r += "(estimates: the busiest of DRAM, L1, shared memory, FP32 and tensor cores at full use of the SMs the grid "
       "fills; latency and occupancy not modelled: cuda/sim/profile_report.cpp)\n";
  return r;
}

}  // namespace cudasim
