// tests/support/op_harness.cpp — the generic op checker (see op_harness.h).
#include "tests/support/op_harness.h"

#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)
#include "tests/cuda/cuda_test_env.h"
#endif

#include <algorithm>
#include <cmath>
#include <exception>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "engine/autograd.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#include "engine/rng.h"
#include "ops/cpu/conv/conv_policy.h"
#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::test {

InputSpec input(std::string name, Shape shape, Gen gen, double lo, double hi) {
  InputSpec s;
  s.name = std::move(name);
  s.shape = shape;
  s.gen = gen;
  s.lo = lo;
  s.hi = hi;
  return s;
}

InputSpec constant(std::string name, Shape shape, Gen gen, double lo, double hi) {
  InputSpec s = input(std::move(name), shape, gen, lo, hi);
  s.differentiable = false;
  return s;
}

InputSpec as_param(InputSpec s) {
  s.param = true;
  return s;
}

InputSpec labels(std::string name, int64_t n, int64_t classes) {
  InputSpec s;
  s.name = std::move(name);
  s.shape = Shape{n};
  s.gen = Gen::labels;
  s.differentiable = false;
  s.dtype = DType::i64;
  s.classes = classes;
  return s;
}

std::vector<Backend>& backends() {
  static std::vector<Backend> list = [] {
    // The CPU with the best GEMM kernels this CPU runs, then once more with
    // each lesser set (ops/cpu/gemm/gemm_isa.h: AVX2, portable), so every set is
    // checked on every op; every other backend puts the best set back, since
    // the CPU is their reference.
    // And once with every 3x3 stride-1 convolution by Winograd F(2x2, 3x3),
    // once by F(4x4, 3x3) (ops/cpu/conv/conv_winograd.h), and once with every convolution by the GEMM
    // lowerings (ops/cpu/conv/conv.cpp), the algorithms the default policy
    // (ops/cpu/conv/conv_policy.h) takes only for some layers or not at all.
    const cpu::GemmIsa best = cpu::supported_gemm_isas().back();
    auto best_cpu = [best] {
      cpu::set_gemm_isa(best);
      cpu::set_conv_policy(cpu::ConvPolicy::heuristic);
    };
    std::vector<Backend> l{Backend{"cpu", Device::cpu(), true, best_cpu, true, true}};
    for (cpu::GemmIsa isa : cpu::supported_gemm_isas())
      if (isa != best)
        l.push_back(Backend{std::string("cpu-") + cpu::gemm_isa_name(isa), Device::cpu(), true, [isa] {
                              cpu::set_gemm_isa(isa);
                              cpu::set_conv_policy(cpu::ConvPolicy::heuristic);
                            }, true, true});
    l.push_back(Backend{"cpu-winograd", Device::cpu(), true, [best] {
                          cpu::set_gemm_isa(best);
                          cpu::set_conv_policy(cpu::ConvPolicy::winograd);
                        }, true, true});
    l.push_back(Backend{"cpu-winograd4", Device::cpu(), true, [best] {
                          cpu::set_gemm_isa(best);
                          cpu::set_conv_policy(cpu::ConvPolicy::winograd4);
                        }, true, true});
    l.push_back(Backend{"cpu-gemm", Device::cpu(), true, [best] {
                          cpu::set_gemm_isa(best);
                          cpu::set_conv_policy(cpu::ConvPolicy::gemm);
                        }, true, true});
#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)
    // The hand-written CUDA kernels (on a GPU, or on the emulator), and the
    // cuDNN/cuBLAS table where this build has it; each compared with the CPU.
    if (testing::cuda_available()) {
      l.push_back(Backend{cuda::is_simulated() ? "cuda-sim" : "cuda-native", Device::cuda(0), true, [best_cpu] {
                            best_cpu();
                            testing::select_native_kernels();
                          }, true, true});
      if (cuda::cudnn_kernels())
        l.push_back(Backend{"cuda-cudnn", Device::cuda(0), true, [best_cpu] {
                              best_cpu();
                              testing::select_cudnn_kernels();
                            }, false, true});
    }
#endif
    return l;
  }();
  return list;
}

std::string Report::summary() const {
  std::string s;
  for (const auto& f : failures) s += f + "\n";
  return s;
}

namespace {

constexpr int kMaxReportedMismatches = 4;

uint64_t hash_name(const std::string& s) {  // FNV-1a
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

std::string num(double v) {
  std::ostringstream os;
  os << std::setprecision(12) << v;
  return os.str();
}

std::string index_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(size_t(shape.ndim()));
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    const int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[size_t(d)] = flat % n;
    flat /= n;
  }
  std::string s = "[";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + "]";
}

double max_abs(const Values& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

Values generate(const InputSpec& s, uint64_t seed, uint64_t stream) {
  PhiloxStream rng(seed, stream);
  const size_t n = size_t(s.shape.numel());
  Values v(n);
  auto unit = [&] { return double(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0); };  // [0, 1)
  switch (s.gen) {
    case Gen::uniform:
      for (auto& x : v) x = s.lo + (s.hi - s.lo) * unit();
      break;
    case Gen::distinct: {
      for (size_t i = 0; i < n; ++i) v[i] = n > 1 ? s.lo + (s.hi - s.lo) * double(i) / double(n - 1) : s.lo;
      for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[size_t(rng.below(i))]);  // Fisher-Yates
      break;
    }
    case Gen::away_from_zero:
      for (auto& x : v) {
        const double m = s.lo + (s.hi - s.lo) * unit();
        x = (rng.next_u32() & 1) ? m : -m;
      }
      break;
    case Gen::grid: {
      const int64_t a = int64_t(std::ceil(s.lo * 64)), b = int64_t(std::floor(s.hi * 64));
      for (auto& x : v) x = double(a + int64_t(rng.below(uint64_t(b - a + 1)))) / 64.0;
      break;
    }
    case Gen::labels:
      for (auto& x : v) x = double(rng.below(uint64_t(s.classes)));
      break;
  }
  return v;
}

double round_to(DType dt, double v) {
  if (dt == DType::f16) return double(half_to_float(float_to_half(float(v))));
  if (dt == DType::bf16) return double(bf16_to_float(double_to_bf16(v)));  // as Tensor::from_vector rounds
  return dt == DType::f32 ? double(float(v)) : v;
}

// ops::param_dtype without depending on ops/: f64 stays f64, else f32.
DType param_of(DType dt) { return dt == DType::f64 ? DType::f64 : DType::f32; }

// The state of checking one case on one backend.
struct Checker {
  const OpCase& c;
  const Backend& b;
  Report& report;
  std::vector<Values> base;  // generated input values (f64)
  uint64_t seed;

  DType dtype_of_input(size_t i, DType dt) const {
    return c.inputs[i].dtype.value_or(c.inputs[i].param ? param_of(dt) : dt);
  }

  std::vector<Values> inputs_as(DType dt) const {
    std::vector<Values> v = base;
    for (size_t i = 0; i < v.size(); ++i)
      for (auto& x : v[i]) x = round_to(dtype_of_input(i, dt), x);
    return v;
  }

  std::vector<Tensor> make_tensors(const std::vector<Values>& vals, DType dt, Device dev, bool grad) const {
    std::vector<Tensor> t;
    for (size_t i = 0; i < vals.size(); ++i) {
      Tensor x = Tensor::from_vector(vals[i], c.inputs[i].shape, dtype_of_input(i, dt), dev);
      if (grad && c.inputs[i].differentiable) x.set_requires_grad(true);
      t.push_back(x);
    }
    return t;
  }

  void fail(const std::string& tag, const std::string& msg) {
    report.failures.push_back("[" + b.name + (tag.empty() ? "" : " " + tag) + "] " + c.name + ": " + msg);
  }

  void note(const std::string& tag, const std::string& what, double d, double tol) {
    if (d / tol > report.worst_ratio) {
      report.worst_ratio = d / tol;
      report.worst_what = "[" + tag + "] " + what;
    }
  }

  // Compares got against expected elementwise: |got - exp| <= rtol |exp| + atol.
  bool compare(const std::string& tag, const std::string& what, const Shape& shape, const Values& got,
               const Values& exp, double rtol, double atol, const char* exp_name, const char* got_name) {
    if (got.size() != exp.size()) {
      fail(tag, what + ": " + std::to_string(got.size()) + " values, expected " + std::to_string(exp.size()));
      return false;
    }
    int bad = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      ++report.values_checked;
      const double d = std::fabs(got[j] - exp[j]);
      const double tol = rtol * std::max(std::fabs(exp[j]), std::fabs(got[j])) + atol;
      note(tag, what, d, tol);
      if (d <= tol) continue;  // NaN fails here
      if (bad++ < kMaxReportedMismatches)
        fail(tag, what + " element " + std::to_string(j) + " " + index_str(shape, int64_t(j)) + ": expected " +
                      num(exp[j]) + " (" + exp_name + "), got " + num(got[j]) + " (" + got_name + "), |diff| " +
                      num(d) + " > tol " + num(tol));
    }
    if (bad > kMaxReportedMismatches)
      fail(tag, what + ": " + std::to_string(bad - kMaxReportedMismatches) + " more mismatching elements");
    return bad == 0;
  }

  Values upstream(int64_t n) const {  // R, the same for every dtype and backend
    InputSpec s = input("R", Shape{n});
    return generate(s, seed, 1000);
  }

  struct Run {
    bool ok = false;
    std::vector<Shape> out_shapes;
    std::vector<Values> outs;
    std::vector<std::optional<Values>> grads;  // per input; set for differentiable ones
    Values r;                                  // the upstream gradient used
  };

  // Forward with grad mode on, the housekeeping checks, and backward(R).
  // Input values (and R) are rounded to `values_dt` (default dt), so an f32
  // run can see exactly the values of an f16 one.
  Run run(DType dt, Device dev, const std::string& tag, std::optional<DType> values_dt = std::nullopt) {
    Run res;
    if (b.select) b.select();
    const DType vdt = values_dt.value_or(dt);
    const std::vector<Values> vals = inputs_as(vdt);
    std::vector<Tensor> in = make_tensors(vals, dt, dev, true);
    std::vector<Tensor> out;
    try {
      out = c.forward(in);
    } catch (const std::exception& e) {
      fail(tag, std::string("forward threw: ") + e.what());
      return res;
    }
    if (out.empty() || !out[0].defined()) {
      fail(tag, "forward returned no output");
      return res;
    }
    for (const Tensor& o : out) {
      if (!o.defined()) {
        fail(tag, "forward returned an undefined output");
        return res;
      }
      if (!(o.device() == dev)) fail(tag, "output " + o.str() + " is not on " + dev.str());
      res.out_shapes.push_back(o.shape());
      res.outs.push_back(o.to_double_vector());
    }
    const DType want = c.out_param_dtype ? param_of(dt) : dt;
    if (c.check_out_dtype && out[0].dtype() != want)
      fail(tag, "output is " + out[0].str() + ", expected dtype " + dtype_name(want));
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].to_double_vector() != vals[i]) fail(tag, "forward modified input " + std::to_string(i) + " '" + c.inputs[i].name + "'");

    bool any_diff = false;
    for (const auto& s : c.inputs) any_diff |= s.differentiable;
    res.grads.resize(in.size());
    if (any_diff) {
      if (!out[0].requires_grad()) {
        fail(tag, "output does not require grad although a differentiable input does");
        return res;
      }
      res.r = upstream(out[0].numel());
      if (is_16bit_float(vdt))
        for (auto& v : res.r) v = round_to(vdt, v);
      try {
        out[0].backward(Tensor::from_vector(res.r, out[0].shape(), out[0].dtype(), out[0].device()));
      } catch (const std::exception& e) {
        fail(tag, std::string("backward threw: ") + e.what());
        return res;
      }
      for (size_t i = 0; i < in.size(); ++i) {
        const std::string who = "input " + std::to_string(i) + " '" + c.inputs[i].name + "'";
        Tensor g = in[i].grad();
        if (!c.inputs[i].differentiable) {
          if (g.defined()) fail(tag, who + " is not differentiable but received a gradient");
          continue;
        }
        if (!g.defined()) {
          fail(tag, "no gradient reached " + who);
          continue;
        }
        if (g.shape() != in[i].shape() || g.dtype() != in[i].dtype() || !(g.device() == in[i].device())) {
          fail(tag, "gradient of " + who + " is " + g.str() + ", the input is " + in[i].str());
          continue;
        }
        res.grads[i] = g.to_double_vector();
      }
    }

    // Nothing is recorded under NoGradGuard.
    try {
      std::vector<Tensor> in2 = make_tensors(vals, dt, dev, true);
      NoGradGuard guard;
      std::vector<Tensor> out2 = c.forward(in2);
      if (!out2.empty() && out2[0].defined() && (out2[0].requires_grad() || out2[0].grad_fn()))
        fail(tag, "forward under NoGradGuard recorded a node");
    } catch (const std::exception& e) {
      fail(tag, std::string("forward under NoGradGuard threw: ") + e.what());
    }
    res.ok = true;
    return res;
  }

  // (a) outputs against the reference.
  void check_forward(DType dt, const Run& r, const std::string& tag) {
    std::vector<RefOut> ref;
    try {
      ref = c.reference(inputs_as(dt));
    } catch (const std::exception& e) {
      fail(tag, std::string("reference threw: ") + e.what());
      return;
    }
    if (ref.size() != r.outs.size()) {
      fail(tag, "forward returned " + std::to_string(r.outs.size()) + " outputs, the reference " +
                    std::to_string(ref.size()));
      return;
    }
    const bool f64 = dt == DType::f64;
    for (size_t k = 0; k < ref.size(); ++k) {
      const std::string what = "output " + std::to_string(k);
      if (r.out_shapes[k] != ref[k].shape) {
        fail(tag, what + " has shape " + r.out_shapes[k].str() + ", expected " + ref[k].shape.str());
        continue;
      }
      const double scale = std::max(1.0, max_abs(ref[k].values));
      compare(tag, what, ref[k].shape, r.outs[k], ref[k].values, f64 ? c.tol.f64_rtol : c.tol.f32_rtol,
              (f64 ? c.tol.f64_atol : c.tol.f32_atol) * scale, "reference", "forward");
    }
  }

  // L = sum(out[0] * R) through the ember forward in f64, no grad.
  bool loss_at(const std::vector<Values>& vals, Device dev, const Values& R, double& L) {
    try {
      NoGradGuard guard;
      std::vector<Tensor> in = make_tensors(vals, DType::f64, dev, false);
      const Values o = c.forward(in)[0].to_double_vector();
      if (o.size() != R.size()) return false;
      long double acc = 0;
      for (size_t j = 0; j < o.size(); ++j) acc += (long double)o[j] * R[j];
      L = double(acc);
      return true;
    } catch (const std::exception& e) {
      fail("f64", std::string("forward threw during finite differences: ") + e.what());
      return false;
    }
  }

  // (b) f64 autograd against central finite differences.
  void check_fd(const Run& r, Device dev) {
    const std::vector<Values> vals = inputs_as(DType::f64);
    double S = 0;
    for (size_t j = 0; j < r.outs[0].size(); ++j) S += std::fabs(r.outs[0][j] * r.r[j]);
    const double atol = c.tol.fd_atol * std::max(1.0, S);
    const double eps = c.fd_eps;
    for (size_t i = 0; i < vals.size(); ++i) {
      if (!c.inputs[i].differentiable || !r.grads[i]) continue;
      const int64_t n = int64_t(vals[i].size());
      std::vector<int64_t> elems(static_cast<size_t>(n));
      std::iota(elems.begin(), elems.end(), 0);
      if (c.max_fd_elements > 0 && n > c.max_fd_elements) {
        PhiloxStream rng(seed, 2000 + i);
        for (int64_t k = n; k > 1; --k) std::swap(elems[size_t(k - 1)], elems[size_t(rng.below(uint64_t(k)))]);
        elems.resize(size_t(c.max_fd_elements));
        std::sort(elems.begin(), elems.end());
      }
      Values numeric, analytic;
      std::vector<int64_t> where;
      for (int64_t j : elems) {
        std::vector<Values> p = vals;
        double lp = 0, lm = 0;
        p[i][size_t(j)] = vals[i][size_t(j)] + eps;
        if (!loss_at(p, dev, r.r, lp)) return;
        p[i][size_t(j)] = vals[i][size_t(j)] - eps;
        if (!loss_at(p, dev, r.r, lm)) return;
        numeric.push_back((lp - lm) / (2 * eps));
        analytic.push_back((*r.grads[i])[size_t(j)]);
        where.push_back(j);
      }
      // Report element indices of the input, not of the sampled subset.
      const std::string what = "gradient of input " + std::to_string(i) + " '" + c.inputs[i].name + "'";
      int bad = 0;
      for (size_t k = 0; k < numeric.size(); ++k) {
        ++report.values_checked;
        const double d = std::fabs(analytic[k] - numeric[k]);
        const double tol = c.tol.fd_rtol * std::max(std::fabs(numeric[k]), std::fabs(analytic[k])) + atol;
        note("f64", what + " vs finite differences", d, tol);
        if (d <= tol) continue;
        if (bad++ < kMaxReportedMismatches)
          fail("f64", what + " element " + std::to_string(where[k]) + " " + index_str(c.inputs[i].shape, where[k]) +
                          ": expected " + num(numeric[k]) + " (finite difference), got " + num(analytic[k]) +
                          " (autograd), |diff| " + num(d) + " > tol " + num(tol));
      }
      if (bad > kMaxReportedMismatches)
        fail("f64", what + ": " + std::to_string(bad - kMaxReportedMismatches) + " more mismatching elements");
    }
  }

  // (c) and the cross-backend comparison: gradients of `got` against `exp`.
  void compare_grads(const std::string& tag, const Run& got, const Run& exp, double rtol, double atol,
                     const char* exp_name, const char* got_name) {
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i].differentiable || !got.grads[i] || !exp.grads[i]) continue;
      const double scale = std::max(1.0, max_abs(*exp.grads[i]));
      compare(tag, "gradient of input " + std::to_string(i) + " '" + c.inputs[i].name + "'", c.inputs[i].shape,
              *got.grads[i], *exp.grads[i], rtol, atol * scale, exp_name, got_name);
    }
  }

  void compare_outputs(const std::string& tag, const Run& got, const Run& exp, double rtol, double atol,
                       const char* exp_name = "cpu", const char* got_name = "this backend") {
    if (got.outs.size() != exp.outs.size())
      fail(tag, std::to_string(got.outs.size()) + " outputs, expected " + std::to_string(exp.outs.size()));
    for (size_t k = 0; k < std::min(got.outs.size(), exp.outs.size()); ++k)
      compare(tag, "output " + std::to_string(k), got.out_shapes[k], got.outs[k], exp.outs[k], rtol,
              atol * std::max(1.0, max_abs(exp.outs[k])), exp_name, got_name);
  }
};

}  // namespace

Report check_op(const OpCase& c, const Backend& backend) {
  Report report;
  report.op = c.name;
  report.backend = backend.name;
  Checker ck{c, backend, report, {}, hash_name(c.name)};
  for (size_t i = 0; i < c.inputs.size(); ++i) ck.base.push_back(generate(c.inputs[i], ck.seed, i));
  const Device dev = backend.device;
  const Tolerance& t = c.tol;

  Checker::Run r64, r32;
  if (backend.has_f64) {
    r64 = ck.run(DType::f64, dev, "f64");
    if (r64.ok) {
      ck.check_forward(DType::f64, r64, "f64");
      ck.check_fd(r64, dev);
    }
  }
  r32 = ck.run(DType::f32, dev, "f32");
  if (r32.ok) ck.check_forward(DType::f32, r32, "f32");

  if (!dev.is_cpu()) {  // the CPU is the reference for other backends
    static const Backend cpu{"cpu", Device::cpu(), true, nullptr};
    Checker cpu_ck{c, cpu, report, ck.base, ck.seed};
    Checker::Run c64 = cpu_ck.run(DType::f64, Device::cpu(), "cpu f64");
    Checker::Run c32 = cpu_ck.run(DType::f32, Device::cpu(), "cpu f32");
    if (r64.ok && c64.ok) {
      ck.compare_outputs("f64 vs cpu", r64, c64, t.f64_rtol * 100, t.f64_atol * 100);
      ck.compare_grads("f64 vs cpu", r64, c64, t.f64_rtol * 100, t.f64_atol * 100, "cpu", "this backend");
    }
    if (r32.ok && c32.ok) {
      ck.compare_outputs("f32 vs cpu", r32, c32, t.f32_rtol, t.f32_atol);
      ck.compare_grads("f32 vs cpu", r32, c32, t.f32_rtol, t.f32_atol, "cpu", "this backend");
    }
    if (!backend.has_f64) r64 = c64;  // (c) below then compares against the CPU's f64 gradients
  }
  if (r32.ok && r64.ok) ck.compare_grads("f32 vs f64", r32, r64, t.f32_rtol, t.f32_atol, "f64 autograd", "f32 autograd");

  // (d) f16 and (e) bf16 against f32 on the same 16-bit-representable inputs;
  // off the CPU also against the CPU's 16-bit run (the same roundings,
  // different sum orders).
  auto check_16bit = [&](DType dt, double rtol, double atol) {
    const std::string name = dtype_name(dt);
    Checker::Run r16 = ck.run(dt, dev, name);
    Checker::Run r32h = ck.run(DType::f32, dev, "f32 on " + name + " values", dt);
    if (r16.ok && r32h.ok) {
      ck.compare_outputs(name + " vs f32", r16, r32h, rtol, atol, "f32", name.c_str());
      const std::string autograd = name + " autograd";
      ck.compare_grads(name + " vs f32", r16, r32h, rtol, atol, "f32 autograd", autograd.c_str());
    }
    if (!dev.is_cpu()) {
      static const Backend cpu{"cpu", Device::cpu(), true, nullptr};
      Checker cpu_ck{c, cpu, report, ck.base, ck.seed};
      Checker::Run c16 = cpu_ck.run(dt, Device::cpu(), "cpu " + name);
      if (r16.ok && c16.ok) {
        ck.compare_outputs(name + " vs cpu", r16, c16, rtol, atol, "cpu", "this backend");
        ck.compare_grads(name + " vs cpu", r16, c16, rtol, atol, "cpu", "this backend");
      }
    }
  };
  if (backend.has_f16) check_16bit(DType::f16, t.f16_rtol, t.f16_atol);
  if (backend.has_bf16) check_16bit(DType::bf16, t.bf16_rtol, t.bf16_atol);
  return report;
}

}  // namespace ember::test
