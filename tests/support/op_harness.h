// tests/support/op_harness.h — one generic checker for every differentiable op.
//
// Modelled on ggml's test-backend-ops and Caffe's gradient checker: an op
// case names its inputs (shape, how to generate values, whether they are
// differentiable), a `forward` that runs ember ops on Tensors, and a
// `reference` that computes the expected outputs with a plain loop over
// doubles, written independently from the kernels. check_op() then verifies,
// on one backend:
//   (a) the forward in f64 against the reference (tight) and in f32 (loose);
//   (b) the f64 autograd gradients of L = sum(out[0] * R), R fixed random,
//       against central finite differences of L through the ember forward;
//   (c) the f32 autograd gradients against the f64 ones;
//   (d) on backends with f16: the forward and the gradients in f16 against
//       f32 on the same (f16-representable) input values, within the f16
//       tolerance (mixed precision: f16 storage, f32 arithmetic), and, off
//       the CPU, the f16 outputs and gradients against the CPU's f16 ones;
//   (e) on backends with bf16: the same in bf16, within the bf16 tolerance;
// plus housekeeping: output shapes, inputs left unmodified by the forward,
// gradients' shapes/dtypes/devices, nothing recorded under NoGradGuard.
// On a non-CPU backend it also compares outputs and gradients with the CPU.
//
// The harness never calls a test framework: it returns a Report listing
// every failure with the op, backend, dtype, input, element, expected and got
// values, so a test can also assert that a broken op is caught.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace ember::test {

enum class Gen {
  uniform,         // uniform in [lo, hi)
  distinct,        // a random permutation of evenly spaced values in [lo, hi]: no ties (max pooling)
  away_from_zero,  // magnitude uniform in [lo, hi] (0 < lo), random sign: no kink near 0 (relu)
  grid,            // uniform multiples of 1/64 in [lo, hi]: exact in f32 and f64 (casts)
  labels,          // integers in [0, classes)
};

struct InputSpec {
  std::string name;
  Shape shape;
  Gen gen = Gen::uniform;
  double lo = -1.0, hi = 1.0;
  bool differentiable = true;
  std::optional<DType> dtype;  // a fixed dtype (labels: i64); default: the float dtype under test
  int64_t classes = 0;         // Gen::labels
  bool param = false;          // stored in ops::param_dtype(dt): f32 under f16 (batch-norm parameters)
};

// A differentiable float input.
InputSpec input(std::string name, Shape shape, Gen gen = Gen::uniform, double lo = -1.0, double hi = 1.0);
// A float input that is not differentiated (batch-norm running statistics).
InputSpec constant(std::string name, Shape shape, Gen gen = Gen::uniform, double lo = -1.0, double hi = 1.0);
// The same input stored in the parameter type (f32 when the data is f16).
InputSpec as_param(InputSpec s);
// i64 class labels in [0, classes), not differentiable.
InputSpec labels(std::string name, int64_t n, int64_t classes);

using Values = std::vector<double>;

struct RefOut {
  Shape shape;
  Values values;
};

struct Tolerance {
  double f64_rtol = 1e-10, f64_atol = 1e-12;  // forward in f64 vs reference
  double f32_rtol = 1e-4, f32_atol = 1e-5;    // forward in f32 vs reference; f32 vs f64 gradients
  double fd_rtol = 1e-6, fd_atol = 1e-8;      // f64 autograd vs finite differences
  double f16_rtol = 1e-2, f16_atol = 1e-2;    // f16 vs f32 on the same inputs (forward and gradients)
  // bf16 vs f32 on the same inputs. bf16 keeps 8 significand bits (unit
  // roundoff 2^-8), f16 11 (2^-11): the same ~20 roundoffs as f16's 1e-2 are
  // 8x wider, 8e-2. Every stored activation and gradient is rounded once, so
  // an op chain of k stored tensors is off by ~k roundoffs, and the absolute
  // term (scaled by the largest expected value) covers small elements whose
  // relative error grows by cancellation. A kernel that skips a rounding or
  // accumulates in bf16 is off by far more on the harness's sums.
  double bf16_rtol = 8e-2, bf16_atol = 8e-2;
  // Absolute tolerances are scaled by max(1, largest magnitude of the
  // expected tensor); fd_atol by max(1, sum |out[0] * R|), the size of L.
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  // Runs the op through ember. outputs[0] is differentiated; further outputs
  // (e.g. updated running statistics) are checked forward only. Called many
  // times (finite differences), so it must not mutate its inputs.
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> forward;
  // The expected outputs from the input values (labels as doubles), one
  // RefOut per forward output.
  std::function<std::vector<RefOut>(const std::vector<Values>&)> reference;
  Tolerance tol{};
  double fd_eps = 1e-6;
  int64_t max_fd_elements = 0;  // per input, 0 = every element; otherwise a fixed random subset
  bool check_out_dtype = true;  // outputs[0] must have the dtype under test (off for casts)
  bool out_param_dtype = false;  // ... or rather ops::param_dtype of it (losses: f32 for f16 logits)
};

// A backend the ops run on: the CPU, and in CUDA builds the hand-written CUDA
// kernels (on a GPU when one is present; on the emulator in build/test_sim)
// and the cuDNN/cuBLAS table (GPU builds with cuDNN).
struct Backend {
  std::string name;
  Device device;
  bool has_f64 = true;           // kernels accept f64 (needed for finite differences)
  std::function<void()> select;  // optional: called before each run (e.g. to install a kernel table)
  bool has_f16 = false;          // kernels accept f16: run the f16 axis (d)
  bool has_bf16 = false;         // kernels accept bf16: run the bf16 axis (e)
};
std::vector<Backend>& backends();

struct Report {
  std::string op, backend;
  std::vector<std::string> failures;
  int64_t values_checked = 0;  // compared values, a guard against checking nothing
  double worst_ratio = 0;      // largest |diff| / tolerance seen (< 1 when passing), to judge margins
  std::string worst_what;      // where it was seen
  bool ok() const { return failures.empty(); }
  std::string summary() const;  // one line per failure
};

Report check_op(const OpCase& c, const Backend& backend);

}  // namespace ember::test
