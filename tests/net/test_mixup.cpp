// tests/net/test_mixup.cpp — net/mixup.h: the Beta (and Gamma) sampler against
// its moments, the per-step draws (deterministic in (seed, step)), mixup's
// images against a computation here in doubles, cutmix's pasted box and its
// lam, the mixed loss against its definition and finite differences, and
// the switch between mixup and cutmix.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "data/batch_iterator.h"
#include "engine/autograd.h"
#include "net/mixup.h"
#include "ops/ops.h"
#include "tests/support/test_helpers.h"

namespace mixup_test {

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

// A batch of B random images (u8 [B, C, H, W]) with labels 10 + i.
data::Batch random_batch(int64_t B, int64_t C, int64_t H, int64_t W, uint64_t seed) {
  data::Batch b;
  b.images = Tensor::empty({B, C, H, W}, DType::u8);
  PhiloxStream rng(seed, 1);
  for (int64_t i = 0; i < b.images.numel(); ++i) b.images.data<uint8_t>()[i] = uint8_t(rng.next_u32());
  b.labels = Tensor::empty({B}, DType::i64);
  for (int64_t i = 0; i < B; ++i) b.labels.data<int64_t>()[i] = 10 + i;
  b.size = B;
  return b;
}

ChannelNorm three_channel_norm() {
  ChannelNorm n;
  n.channels = 3;
  const float mean[3] = {0.485f, 0.456f, 0.406f}, inv_std[3] = {1 / 0.229f, 1 / 0.224f, 1 / 0.225f};
  for (int c = 0; c < 3; ++c) n.mean[c] = mean[c], n.inv_std[c] = inv_std[c];
  return n;
}

std::vector<int64_t> ints(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<int64_t>(h.data<int64_t>(), h.data<int64_t>() + h.numel());
}

std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

// Mean softmax cross-entropy with label smoothing s, in doubles from the definition.
double cross_entropy_here(const std::vector<double>& z, int64_t N, int64_t C, const std::vector<int64_t>& labels,
                          double s) {
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double* row = &z[size_t(n * C)];
    const double m = *std::max_element(row, row + C);
    double se = 0;
    for (int64_t c = 0; c < C; ++c) se += std::exp(row[c] - m);
    const double lse = m + std::log(se);
    for (int64_t c = 0; c < C; ++c)
      total += ((1 - s) * (c == labels[size_t(n)] ? 1.0 : 0.0) + s / double(C)) * (lse - row[c]);
  }
  return total / double(N);
}

}  // namespace mixup_test

using namespace mixup_test;

TEST_CASE("mixup: Beta(a, a) samples have mean 1/2 and variance 1/(4(2a+1)); Gamma(a) mean and variance a") {
  constexpr int kSamples = 200000;
  for (double a : {0.2, 1.0, 4.0}) {
    CAPTURE(a);
    PhiloxStream rng(2024, uint64_t(a * 1000));
    double sum = 0, sum_sq = 0;
    int below_tenth = 0;
    for (int i = 0; i < kSamples; ++i) {
      const double x = net::sample_beta(rng, a, a);
      REQUIRE(x >= 0);
      REQUIRE(x <= 1);
      sum += x;
      sum_sq += (x - 0.5) * (x - 0.5);
      below_tenth += x < 0.1;
    }
    const double mean = sum / kSamples, var = sum_sq / kSamples - (mean - 0.5) * (mean - 0.5);
    const double want_var = 1.0 / (4.0 * (2.0 * a + 1.0));
    // Standard errors: of the mean sqrt(var / n); of the variance sqrt((mu4 - var^2) / n),
    // with mu4 <= var / 4 since |x - 1/2| <= 1/2.
    const double se_mean = std::sqrt(want_var / kSamples);
    const double se_var = std::sqrt((want_var / 4 - want_var * want_var) / kSamples);
    CHECK(std::fabs(mean - 0.5) < 5 * se_mean);
    CHECK(std::fabs(var - want_var) < 5 * se_var);
    // The shape too, at one point of the CDF: P(x < 0.1) is 0.1 for a = 1, more for a < 1, less for a > 1.
    const double p = double(below_tenth) / kSamples;
    if (a == 1.0) CHECK(std::fabs(p - 0.1) < 5 * std::sqrt(0.09 / kSamples));
    if (a < 1.0) CHECK(p > 0.25);
    if (a > 1.0) CHECK(p < 0.01);

    double g_sum = 0, g_sq = 0;
    for (int i = 0; i < kSamples; ++i) {
      const double g = net::sample_gamma(rng, a);
      REQUIRE(g >= 0);
      g_sum += g;
      g_sq += g * g;
    }
    const double g_mean = g_sum / kSamples, g_var = g_sq / kSamples - g_mean * g_mean;
    CHECK(std::fabs(g_mean - a) < 5 * std::sqrt(a / kSamples));
    CHECK(std::fabs(g_var - a) < 0.05 * a);  // the variance's standard error is sqrt((6a + 2a^2) / n): < 1% here
  }
  PhiloxStream rng(1, 1);
  CHECK(error_of([&] { net::sample_beta(rng, 0.0, 1.0); }) ==
        "sample_beta: the shape parameter must be a positive number, got 0");
  CHECK(contains(error_of([&] { net::sample_gamma(rng, -1.0); }), "sample_gamma: the shape parameter must be"));
  // Tiny shape parameters give 0 or 1 (nearly always), never NaN.
  for (int i = 0; i < 1000; ++i) {
    const double x = net::sample_beta(rng, 0.01, 0.01);
    REQUIRE(x >= 0);
    REQUIRE(x <= 1);
  }
}

TEST_CASE("mixup: the same (seed, step) draws the same kind, lam and box; another step or seed draws others") {
  const uint64_t tag3 = uint64_t(3) << 62;
  CHECK(net::mix_stream_id(0) == tag3);
  CHECK(net::mix_stream_id(12345) == (tag3 | 12345));
  const uint64_t mix_tag = net::mix_stream_id(12345) >> 62;
  CHECK(mix_tag != data::shuffle_stream_id(3) >> 62);
  CHECK(mix_tag != data::sample_stream_id(3, 5) >> 62);
  CHECK(contains(error_of([&] { net::mix_stream_id(-1); }), "mixup: step -1 outside [0, 2^56)"));

  const net::MixOptions options[] = {{0.4, 0.0}, {0.0, 1.0}, {0.2, 1.0}};
  for (const net::MixOptions& o : options) {
    CAPTURE(o.mixup_alpha);
    CAPTURE(o.cutmix_alpha);
    std::set<double> lams;
    std::set<std::vector<int64_t>> boxes;
    for (int64_t step = 0; step < 50; ++step) {
      const net::MixDraw d = net::draw_mix(o, 7, step, 24, 32);
      const net::MixDraw again = net::draw_mix(o, 7, step, 24, 32);
      CHECK(again.kind == d.kind);
      CHECK(again.lam == d.lam);
      CHECK(again.box == d.box);
      CHECK(d.kind != net::MixKind::none);
      CHECK(d.lam >= 0);
      CHECK(d.lam <= 1);
      lams.insert(d.lam);
      if (d.kind == net::MixKind::cutmix) boxes.insert({d.box.y0, d.box.y1, d.box.x0, d.box.x1});
      const net::MixDraw other_seed = net::draw_mix(o, 8, step, 24, 32);
      CHECK((other_seed.lam != d.lam || other_seed.box != d.box));
    }
    // Mixup's lam is continuous: never twice; cutmix's is a box fraction, which may repeat.
    CHECK(lams.size() >= (o.cutmix_alpha > 0 ? 20u : 50u));
    if (o.cutmix_alpha > 0) CHECK(boxes.size() >= 20);
  }

  // A whole mixed batch is the same for the same (seed, step), another for another step.
  const data::Batch b = random_batch(4, 3, 8, 8, 3);
  for (const net::MixOptions& o : options) {
    const net::MixedBatch m1 = net::mix_batch(b, o, 5, 100, three_channel_norm(), DType::f32, Device::cpu());
    const net::MixedBatch m2 = net::mix_batch(b, o, 5, 100, three_channel_norm(), DType::f32, Device::cpu());
    const net::MixedBatch m3 = net::mix_batch(b, o, 5, 101, three_channel_norm(), DType::f32, Device::cpu());
    CHECK(m1.images.to_double_vector() == m2.images.to_double_vector());
    CHECK(m1.lam == m2.lam);
    CHECK(m1.box == m2.box);
    CHECK((m3.lam != m1.lam || m3.box != m1.box || m3.kind != m1.kind));
  }
}

TEST_CASE("mixup: images are lam * normalize(x) + (1 - lam) * normalize(x of sample B-1-i), labels_b reversed") {
  const ChannelNorm norm = three_channel_norm();
  const int64_t B = 5, C = 3, H = 4, W = 6;  // odd B: the middle sample meets itself
  const data::Batch b = random_batch(B, C, H, W, 11);
  const std::vector<uint8_t> before = bytes(b.images);
  const net::MixOptions o{0.4, 0.0};
  struct Precision {
    DType dt;
    double tol;
  };
  for (const Precision pr : {Precision{DType::f32, 1e-5}, Precision{DType::f64, 1e-12}, Precision{DType::f16, 5e-3},
                             Precision{DType::bf16, 4e-2}}) {
    for (int64_t step = 0; step < 6; ++step) {
      const std::string dtype = dtype_name(pr.dt);
      CAPTURE(dtype);
      CAPTURE(step);
      const net::MixedBatch m = net::mix_batch(b, o, 42, step, norm, pr.dt, Device::cpu());
      CHECK(m.kind == net::MixKind::mixup);
      CHECK(m.lam == net::draw_mix(o, 42, step, H, W).lam);
      CHECK(m.lam > 0);
      CHECK(m.lam < 1);
      REQUIRE(m.images.dtype() == pr.dt);
      REQUIRE(m.images.shape() == Shape{B, C, H, W});
      CHECK(!m.images.requires_grad());
      CHECK(ints(m.labels_a) == std::vector<int64_t>{10, 11, 12, 13, 14});
      CHECK(ints(m.labels_b) == std::vector<int64_t>{14, 13, 12, 11, 10});
      const std::vector<double> got = m.images.to_double_vector();
      int bad = 0;
      for (int64_t i = 0; i < B; ++i)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = 0; p < H * W; ++p) {
            auto normalised = [&](int64_t sample) {
              const double v = before[size_t((sample * C + c) * H * W + p)];
              return (v / 255.0 - double(norm.mean[c])) * double(norm.inv_std[c]);
            };
            const double want = m.lam * normalised(i) + (1 - m.lam) * normalised(B - 1 - i);
            const double g = got[size_t((i * C + c) * H * W + p)];
            if (std::fabs(g - want) > pr.tol * std::max(1.0, std::fabs(want)) && bad++ < 3)
              FAIL_CHECK("sample " << i << " channel " << c << " pixel " << p << ": " << g << ", expected " << want);
          }
      CHECK(bad == 0);
    }
  }
  CHECK(bytes(b.images) == before);  // the loader's batch is left as it was
}

TEST_CASE("mixup: cutmix pastes the box from sample B-1-i, the rest from sample i; lam = 1 - box area / image area") {
  const int64_t B = 4, C = 3, H = 8, W = 12;  // H != W: rows and columns cannot be swapped unnoticed
  const data::Batch b = random_batch(B, C, H, W, 21);
  const std::vector<uint8_t> x = bytes(b.images);
  const net::MixOptions o{0.0, 1.0};
  int clipped = 0, empty = 0;
  for (int64_t step = 0; step < 200; ++step) {
    CAPTURE(step);
    const net::MixedBatch m = net::mix_batch(b, o, 9, step, three_channel_norm(), DType::f32, Device::cpu());
    REQUIRE(m.kind == net::MixKind::cutmix);
    REQUIRE(m.images.dtype() == DType::u8);
    REQUIRE(m.images.shape() == Shape{B, C, H, W});
    const net::CutBox& box = m.box;
    REQUIRE(0 <= box.y0);
    REQUIRE(box.y0 <= box.y1);
    REQUIRE(box.y1 <= H);
    REQUIRE(0 <= box.x0);
    REQUIRE(box.x0 <= box.x1);
    REQUIRE(box.x1 <= W);
    CHECK(m.lam == 1.0 - double((box.y1 - box.y0) * (box.x1 - box.x0)) / double(H * W));
    CHECK(box == net::draw_mix(o, 9, step, H, W).box);
    clipped += box.y0 == 0 || box.y1 == H || box.x0 == 0 || box.x1 == W;
    empty += box.area() == 0;
    CHECK(ints(m.labels_b) == std::vector<int64_t>{13, 12, 11, 10});
    const std::vector<uint8_t> got = bytes(m.images);
    int bad = 0;
    for (int64_t i = 0; i < B; ++i)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t y = 0; y < H; ++y)
          for (int64_t xx = 0; xx < W; ++xx) {
            const bool inside = y >= box.y0 && y < box.y1 && xx >= box.x0 && xx < box.x1;
            const int64_t from = inside ? B - 1 - i : i;
            const size_t at = size_t(((i * C + c) * H + y) * W + xx);
            if (got[at] != x[size_t(((from * C + c) * H + y) * W + xx)] && bad++ < 3)
              FAIL_CHECK("sample " << i << " (" << c << ", " << y << ", " << xx << ") "
                                   << std::string(inside ? "inside" : "outside") << " the box is not sample " << from
                                   << "'s");
          }
    CHECK(bad == 0);
  }
  CHECK(clipped > 20);  // the clipping (and lam's recomputation after it) is exercised
  CHECK(empty < 100);
  CHECK(bytes(b.images) == x);
}

TEST_CASE("mixup: mixed_cross_entropy is lam CE(labels_a) + (1 - lam) CE(labels_b); its gradient matches finite differences") {
  const int64_t N = 5, K = 4;
  Generator gen(6);
  Tensor z = Tensor::empty({N, K}, DType::f64);
  ops::uniform_(z, -3, 3, gen);
  const std::vector<double> zv = z.to_double_vector();
  net::MixedBatch m;
  const std::vector<int64_t> la{0, 1, 2, 3, 1}, lb{1, 3, 2, 0, 0};
  m.labels_a = Tensor::from_data(la.data(), {N});
  m.labels_b = Tensor::from_data(lb.data(), {N});
  m.kind = net::MixKind::mixup;
  for (double lam : {0.3, 0.85, 1.0, 0.0}) {
    for (double smoothing : {0.0, 0.1}) {
      CAPTURE(lam);
      CAPTURE(smoothing);
      m.lam = lam;
      const double want = lam * cross_entropy_here(zv, N, K, la, smoothing) +
                          (1 - lam) * cross_entropy_here(zv, N, K, lb, smoothing);
      Tensor logits = z.clone();
      logits.set_requires_grad(true);
      const Tensor loss = net::mixed_cross_entropy(logits, m, smoothing);
      REQUIRE(loss.shape() == Shape{1});
      CHECK(loss.item() == doctest::Approx(want).epsilon(1e-12));
      loss.backward();
      const std::vector<double> grad = logits.grad().to_double_vector();
      const double eps = 1e-6;
      for (int64_t j = 0; j < N * K; ++j) {
        std::vector<double> plus = zv, minus = zv;
        plus[size_t(j)] += eps;
        minus[size_t(j)] -= eps;
        NoGradGuard no_grad;
        const double lp = net::mixed_cross_entropy(Tensor::from_vector(plus, {N, K}, DType::f64), m, smoothing).item();
        const double lm = net::mixed_cross_entropy(Tensor::from_vector(minus, {N, K}, DType::f64), m, smoothing).item();
        CHECK(grad[size_t(j)] == doctest::Approx((lp - lm) / (2 * eps)).epsilon(1e-6).scale(1e-2));
      }
    }
  }
  // f32 logits (as in training): an f32 loss that agrees.
  m.lam = 0.3;
  const Tensor loss32 = net::mixed_cross_entropy(ops::cast(z, DType::f32), m, 0.1);
  CHECK(loss32.dtype() == DType::f32);
  CHECK(loss32.item() == doctest::Approx(0.3 * cross_entropy_here(zv, N, K, la, 0.1) +
                                         0.7 * cross_entropy_here(zv, N, K, lb, 0.1))
                             .epsilon(1e-5));
  m.lam = 1.5;
  CHECK(contains(error_of([&] { net::mixed_cross_entropy(z, m, 0.0); }), "mixed_cross_entropy: lam 1.5 outside [0, 1]"));
}

TEST_CASE("mixup: both alphas > 0 pick cutmix or mixup about half the time each; one alpha, that kind; none, the batch") {
  const net::MixOptions both{0.2, 1.0};
  int cutmix = 0, mixup = 0;
  const int steps = 400;
  for (int64_t step = 0; step < steps; ++step) {
    const net::MixDraw d = net::draw_mix(both, 123, step, 32, 32);
    cutmix += d.kind == net::MixKind::cutmix;
    mixup += d.kind == net::MixKind::mixup;
  }
  CHECK(cutmix + mixup == steps);
  CHECK(std::fabs(double(cutmix) / steps - 0.5) < 5 * std::sqrt(0.25 / steps));
  for (int64_t step = 0; step < 50; ++step) {
    CHECK(net::draw_mix({0.3, 0.0}, 1, step, 8, 8).kind == net::MixKind::mixup);
    CHECK(net::draw_mix({0.0, 0.3}, 1, step, 8, 8).kind == net::MixKind::cutmix);
  }
  // Off: the batch as it is, lam 1, labels_b = labels_a; the loss is plain cross-entropy.
  const data::Batch b = random_batch(3, 3, 4, 4, 2);
  const net::MixedBatch m = net::mix_batch(b, {}, 1, 0, three_channel_norm(), DType::f32, Device::cpu());
  CHECK(m.kind == net::MixKind::none);
  CHECK(m.lam == 1.0);
  CHECK(m.images.dtype() == DType::u8);
  CHECK(bytes(m.images) == bytes(b.images));
  CHECK(ints(m.labels_b) == ints(b.labels));
  CHECK(std::string(net::mix_kind_name(net::MixKind::cutmix)) == "cutmix");
  // Errors.
  CHECK(contains(error_of([&] { net::draw_mix({-0.1, 0.0}, 1, 0, 8, 8); }), "mixup: alpha must be >= 0 (0: off), got -0.1"));
  CHECK(contains(error_of([&] { net::draw_mix({0.0, -1.0}, 1, 0, 8, 8); }), "cutmix: alpha must be >= 0"));
  data::Batch f = b;
  f.images = Tensor::zeros({3, 3, 4, 4});
  CHECK(contains(error_of([&] { net::mix_batch(f, both, 1, 0, three_channel_norm(), DType::f32, Device::cpu()); }),
                 "mix_batch: images must be u8 [B, C, H, W] on the CPU"));
  CHECK(contains(error_of([&] { net::mix_batch(b, both, 1, 0, three_channel_norm(), DType::i64, Device::cpu()); }),
                 "mix_batch: the compute dtype must be f32, f64, f16 or bf16"));
}
