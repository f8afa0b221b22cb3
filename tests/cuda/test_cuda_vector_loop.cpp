// tests/cuda/test_cuda_vector_loop.cpp — the memory-bound CUDA kernels'
// two paths (cuda/kernels/vector_loop.cuh): 16-byte packs where every
// operand is aligned, element by element where one is not (a view at an odd
// offset) and for the tail past the last whole pack. Each kernel runs on
// operands shifted by 0 or 1 element, over sizes around the pack size, in
// f64, f32, f16 and bf16, against the CPU table on the same values; and the
// fused batch norm + add + ReLU (cuda/kernels/batch_norm.cu) against the
// CPU's batch norm then add_relu, with channel planes whose size does and
// does not divide into packs. Runs on the emulator and on a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "ops/pointwise.h"
#include "tests/cuda/cuda_test_env.h"

using namespace ember;
using ember::testing::cpu_table;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::cuda_table;

namespace {

const DType kAllFloat[] = {DType::f64, DType::f32, DType::f16, DType::bf16};
const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::vector<double> uniform(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  PhiloxStream rs(seed, 11);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = lo + (hi - lo) * rs.uniform();
  return v;
}

// n values at element `offset` of a buffer of n + 1 (the first `offset`
// slots hold 7), on the CPU and on the device; at() is the operand pointer.
struct Operand {
  Tensor cpu, dev;
  int64_t offset = 0;
  DType dt;
  Operand(const std::vector<double>& v, int64_t off, DType type) : offset(off), dt(type) {
    std::vector<double> padded(v.size() + 1, 7.0);
    std::copy(v.begin(), v.end(), padded.begin() + off);
    const Shape s{int64_t(padded.size())};
    cpu = Tensor::from_vector(padded, s, dt);
    dev = Tensor::from_vector(padded, s, dt, Device::cuda(0));
  }
  void* c() const { return static_cast<char*>(cpu.raw_data()) + offset * int64_t(dtype_size(dt)); }
  void* d() const { return static_cast<char*>(dev.raw_data()) + offset * int64_t(dtype_size(dt)); }
  // The n values, from each side.
  std::vector<double> host_values() const { return slice(cpu.to_double_vector()); }
  std::vector<double> device_values() const { return slice(dev.to_double_vector()); }
  std::vector<double> slice(const std::vector<double>& all) const {
    return std::vector<double>(all.begin() + offset, all.end() - (1 - offset));
  }
};

// Same values, NaN where NaN, and the same sign of zero.
void check_same(const std::vector<double>& got, const std::vector<double>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i])
                                        : got[i] == want[i] && std::signbit(got[i]) == std::signbit(want[i]);
    if (!ok) {
      FAIL_CHECK(what << ": element " << i << " of " << got.size() << " is " << got[i] << ", expected " << want[i]);
      return;
    }
  }
}

// Within tol of the result's scale (max |want|, at least 1); NaN where NaN.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double scale = 1.0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? std::isnan(got[i]) : std::abs(got[i] - want[i]) <= tol * scale;
    if (!ok) {
      FAIL_CHECK(what << ": element " << i << " of " << got.size() << " is " << got[i] << ", expected " << want[i]
                      << " (tolerance " << tol * scale << ")");
      return;
    }
  }
}

// One rounding of the result in the storage type; f32/f64 allow
// summation-order noise of the batch-norm statistics.
double tolerance(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-10;
    case DType::f32: return 1e-4;
    case DType::f16: return 2e-3;
    default: return 1.6e-2;
  }
}

}  // namespace

TEST_CASE("cuda elementwise kernels: 16-byte packs, unaligned operands and tails give the CPU's bits" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const auto& K = cuda_table();
  const auto& C = cpu_table();
  struct Offsets {
    int64_t a, b, y;
  };
  const Offsets offsets[] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {1, 1, 1}};
  for (DType dt : kAllFloat)
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(17), int64_t(1000), int64_t(4099)})
      for (const Offsets& o : offsets) {
        CAPTURE(dtype_name(dt));
        CAPTURE(n);
        CAPTURE(o.a);
        CAPTURE(o.b);
        CAPTURE(o.y);
        std::vector<double> av = uniform(n, 1), bv = uniform(n, 2);
        av[0] = kNaN;                   // NaN propagates through add and relu
        if (n > 5) av[5] = -0.0;        // relu(-0) keeps the sign
        if (n > 6) bv[6] = kNaN;        // relu_backward: a NaN gradient passes where y > 0
        const Operand a(av, o.a, dt), b(bv, o.b, dt);
        using Binary = void (*)(DType, const void*, const void*, void*, int64_t, Stream);
        const struct {
          const char* name;
          Binary cuda, cpu;
        } binaries[] = {{"add", K.add, C.add}, {"add_relu", K.add_relu, C.add_relu},
                        {"relu_backward", K.relu_backward, C.relu_backward}};
        for (const auto& op : binaries) {
          const Operand y(std::vector<double>(size_t(n), 9.0), o.y, dt);
          op.cuda(dt, a.d(), b.d(), y.d(), n, cuda_stream());
          op.cpu(dt, a.c(), b.c(), y.c(), n, nullptr);
          check_same(y.device_values(), y.host_values(), op.name);
          CHECK(y.dev.to_double_vector()[size_t(o.y == 0 ? n : 0)] == 7.0);  // the slot outside is untouched
        }
        {
          const Operand y(std::vector<double>(size_t(n), 9.0), o.y, dt);
          K.relu_forward(dt, a.d(), y.d(), n, cuda_stream());
          C.relu_forward(dt, a.c(), y.c(), n, nullptr);
          check_same(y.device_values(), y.host_values(), "relu_forward");
        }
        {  // the scale form never reads y (NaN there), the accumulate form reads it
          const Operand y(std::vector<double>(size_t(n), kNaN), o.y, dt);
          K.axpby(dt, -0.5, b.d(), 0.0, y.d(), n, cuda_stream());
          C.axpby(dt, -0.5, b.c(), 0.0, y.c(), n, nullptr);
          check_same(y.device_values(), y.host_values(), "axpby scale");
          K.axpby(dt, 1.0, a.d(), 1.0, y.d(), n, cuda_stream());
          C.axpby(dt, 1.0, a.c(), 1.0, y.c(), n, nullptr);
          check_same(y.device_values(), y.host_values(), "axpby accumulate");
        }
        {  // dropout: the element's index picks its Philox draw, so packs must pass the right index
          const PointwiseArgs args{0.4, 1234, 56};
          const Operand y(std::vector<double>(size_t(n), 9.0), o.y, dt);
          K.pointwise_forward(dt, PointwiseOp::dropout, b.d(), y.d(), n, args, cuda_stream());
          C.pointwise_forward(dt, PointwiseOp::dropout, b.c(), y.c(), n, args, nullptr);
          check_same(y.device_values(), y.host_values(), "dropout forward");
          K.pointwise_backward(dt, PointwiseOp::dropout, nullptr, a.d(), y.d(), n, args, cuda_stream());
          C.pointwise_backward(dt, PointwiseOp::dropout, nullptr, a.c(), y.c(), n, args, nullptr);
          check_same(y.device_values(), y.host_values(), "dropout backward");
        }
        {  // in place: y is a
          const Operand y(av, o.a, dt);
          K.add_relu(dt, y.d(), b.d(), y.d(), n, cuda_stream());
          C.add_relu(dt, y.c(), b.c(), y.c(), n, nullptr);
          check_same(y.device_values(), y.host_values(), "add_relu in place");
        }
      }
}

TEST_CASE("cuda batch norm + add + relu (fused, training) matches the CPU's batch norm then add_relu" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const auto& K = cuda_table();
  const auto& C = cpu_table();
  const double momentum = 0.1, eps = 1e-5;
  struct Case {
    int64_t N, Ch, HW;
  };
  // 8x8 planes divide into packs of every type; 7x7 into none; 700 into f32/f64 packs only
  const Case cases[] = {{2, 3, 64}, {3, 2, 49}, {2, 2, 700}};
  uint64_t seed = 300;
  for (DType dt : kAllFloat)
    for (const Case& c : cases)
      for (int64_t r_offset : {int64_t(0), int64_t(1)}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(c.HW);
        CAPTURE(r_offset);
        const DType pt = dt == DType::f64 ? DType::f64 : DType::f32;
        const int64_t n = c.N * c.Ch * c.HW;
        auto param = [&](const std::vector<double>& v) { return Operand(v, 0, pt); };
        const Operand x(uniform(n, seed++, -1.0, 1.0), 0, dt), r(uniform(n, seed++, -0.5, 0.5), r_offset, dt);
        const Operand gamma = param(uniform(c.Ch, seed++, 0.5, 1.5)), beta = param(uniform(c.Ch, seed++, -0.2, 0.2));
        const Operand rmean = param(uniform(c.Ch, seed++)), rvar = param(uniform(c.Ch, seed++, 0.5, 2.0));
        const Operand y(std::vector<double>(size_t(n), kNaN), 0, dt);
        const Operand smean = param(std::vector<double>(size_t(c.Ch), kNaN)),
                      sinv = param(std::vector<double>(size_t(c.Ch), kNaN));
        K.batch_norm_add_relu_forward_train(dt, x.d(), r.d(), gamma.d(), beta.d(), y.d(), smean.d(), sinv.d(),
                                            rmean.d(), rvar.d(), c.N, c.Ch, c.HW, momentum, eps, cuda_stream());
        C.batch_norm_add_relu_forward_train(dt, x.c(), r.c(), gamma.c(), beta.c(), y.c(), smean.c(), sinv.c(),
                                            rmean.c(), rvar.c(), c.N, c.Ch, c.HW, momentum, eps, nullptr);
        const double tol = tolerance(dt);
        check_close(y.device_values(), y.host_values(), tol, "forward y");
        check_close(smean.device_values(), smean.host_values(), tol, "save_mean");
        check_close(rvar.device_values(), rvar.host_values(), tol, "running_var");
        const std::vector<double> yd = y.device_values();
        const auto zeros = std::count(yd.begin(), yd.end(), 0.0);
        CHECK(zeros > n / 5);  // the ReLU masked a good share, not all
        CHECK(zeros < 4 * n / 5);

        // Fusion changes no bits: the CUDA batch norm, then the CUDA add_relu.
        const Operand z(std::vector<double>(size_t(n), kNaN), 0, dt);
        const Operand rm2 = param(uniform(c.Ch, 0)), rv2 = param(uniform(c.Ch, 0, 0.5, 2.0));
        K.batch_norm_forward_train(dt, x.d(), gamma.d(), beta.d(), z.d(), smean.d(), sinv.d(), rm2.d(), rv2.d(), c.N,
                                   c.Ch, c.HW, momentum, eps, cuda_stream());
        K.add_relu(dt, z.d(), r.d(), z.d(), n, cuda_stream());
        check_same(z.device_values(), yd, "fused vs batch norm then add_relu on the device");

        // Backward from the CPU's y and statistics (the same values on both sides).
        const Operand y2(y.host_values(), 0, dt), sm(smean.host_values(), 0, pt), si(sinv.host_values(), 0, pt);
        const Operand gy(uniform(n, seed++), 0, dt);
        const Operand gx(std::vector<double>(size_t(n), kNaN), 0, dt), gr(std::vector<double>(size_t(n), kNaN), r_offset, dt);
        const Operand gg = param(std::vector<double>(size_t(c.Ch), kNaN)),
                      gb = param(std::vector<double>(size_t(c.Ch), kNaN));
        K.batch_norm_add_relu_backward_train(dt, x.d(), y2.d(), gy.d(), gamma.d(), sm.d(), si.d(), gx.d(), gr.d(),
                                             gg.d(), gb.d(), c.N, c.Ch, c.HW, eps, cuda_stream());
        C.batch_norm_add_relu_backward_train(dt, x.c(), y2.c(), gy.c(), gamma.c(), sm.c(), si.c(), gx.c(), gr.c(),
                                             gg.c(), gb.c(), c.N, c.Ch, c.HW, eps, nullptr);
        check_same(gr.device_values(), gr.host_values(), "backward gr (gy masked by y)");
        check_close(gx.device_values(), gx.host_values(), tol, "backward gx");
        check_close(gg.device_values(), gg.host_values(), tol, "backward ggamma");
        check_close(gb.device_values(), gb.host_values(), tol, "backward gbeta");
      }
}
