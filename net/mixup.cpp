// net/mixup.cpp — the random draws of mixup/cutmix (Beta via Gamma,
// rand_bbox), the mixing of a batch and the mixed loss (see net/mixup.h).
#include "net/mixup.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/autograd.h"
#include "engine/error.h"
#include "ops/ops.h"

namespace ember::net {
namespace {

constexpr int64_t kMaxStep = (int64_t(1) << 56) - 1;

// 53 random bits: a uniform double in [0, 1), and in (0, 1] (safe for log).
double unit(PhiloxStream& rng) { return double(rng.next_u64() >> 11) * 0x1p-53; }
double unit_open0(PhiloxStream& rng) { return double((rng.next_u64() >> 11) + 1) * 0x1p-53; }

// A standard normal by Box-Muller (one of the pair).
double normal(PhiloxStream& rng) {
  const double u1 = unit_open0(rng), u2 = unit(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// log of a Gamma(a, 1) sample. Marsaglia & Tsang (2000) for a >= 1; for a < 1
// their boost Gamma(a) = Gamma(a + 1) * U^(1/a), added in logarithms so that
// U^(1/a) cannot underflow to 0.
double log_gamma_sample(PhiloxStream& rng, double a) {
  if (a < 1) return log_gamma_sample(rng, a + 1) + std::log(unit_open0(rng)) / a;
  const double d = a - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double z = normal(rng);
    double v = 1.0 + c * z;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = unit_open0(rng);
    if (u < 1.0 - 0.0331 * z * z * z * z || std::log(u) < 0.5 * z * z + d * (1.0 - v + std::log(v)))
      return std::log(d) + std::log(v);
  }
}

void check_shape_param(double a, const char* what) {
  EMBER_CHECK(a > 0 && std::isfinite(a), what, ": the shape parameter must be a positive number, got ", a);
}

}  // namespace

const char* mix_kind_name(MixKind kind) {
  switch (kind) {
    case MixKind::mixup: return "mixup";
    case MixKind::cutmix: return "cutmix";
    case MixKind::none: break;
  }
  return "none";
}

uint64_t mix_stream_id(int64_t step) {
  EMBER_CHECK(step >= 0 && step <= kMaxStep, "mixup: step ", step, " outside [0, 2^56)");
  return uint64_t(3) << 62 | uint64_t(step);
}

double sample_gamma(PhiloxStream& rng, double a) {
  check_shape_param(a, "sample_gamma");
  return std::exp(log_gamma_sample(rng, a));
}

// X / (X + Y) = 1 / (1 + Y / X) = 1 / (1 + exp(log Y - log X))
double sample_beta(PhiloxStream& rng, double a, double b) {
  check_shape_param(a, "sample_beta");
  check_shape_param(b, "sample_beta");
  const double lx = log_gamma_sample(rng, a), ly = log_gamma_sample(rng, b);
  return 1.0 / (1.0 + std::exp(ly - lx));
}

CutBox cutmix_box(double lam, int64_t H, int64_t W, PhiloxStream& rng) {
  EMBER_CHECK(lam >= 0 && lam <= 1, "cutmix_box: lam ", lam, " outside [0, 1]");
  EMBER_CHECK(H > 0 && W > 0, "cutmix_box: empty image ", H, "x", W);
  const double ratio = std::sqrt(1.0 - lam);
  const int64_t cut_h = int64_t(double(H) * ratio), cut_w = int64_t(double(W) * ratio);
  const int64_t cy = int64_t(rng.below(uint64_t(H))), cx = int64_t(rng.below(uint64_t(W)));
  auto clip = [](int64_t v, int64_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); };
  CutBox box;
  box.y0 = clip(cy - cut_h / 2, H);
  box.y1 = clip(cy + cut_h / 2, H);
  box.x0 = clip(cx - cut_w / 2, W);
  box.x1 = clip(cx + cut_w / 2, W);
  return box;
}

MixDraw draw_mix(const MixOptions& o, uint64_t seed, int64_t step, int64_t H, int64_t W) {
  EMBER_CHECK(o.mixup_alpha >= 0 && std::isfinite(o.mixup_alpha), "mixup: alpha must be >= 0 (0: off), got ",
              o.mixup_alpha);
  EMBER_CHECK(o.cutmix_alpha >= 0 && std::isfinite(o.cutmix_alpha), "cutmix: alpha must be >= 0 (0: off), got ",
              o.cutmix_alpha);
  MixDraw d;
  if (!o.enabled()) return d;
  PhiloxStream rng(seed, mix_stream_id(step));
  const bool cut = o.mixup_alpha > 0 && o.cutmix_alpha > 0 ? unit(rng) < 0.5 : o.cutmix_alpha > 0;
  const double alpha = cut ? o.cutmix_alpha : o.mixup_alpha;
  d.kind = cut ? MixKind::cutmix : MixKind::mixup;
  d.lam = sample_beta(rng, alpha, alpha);
  if (cut) {
    d.box = cutmix_box(d.lam, H, W, rng);
    d.lam = 1.0 - double(d.box.area()) / double(H * W);  // what the box really covers after clipping
  }
  return d;
}

MixedBatch mix_batch(const data::Batch& b, const MixOptions& o, uint64_t seed, int64_t step, const ChannelNorm& norm,
                     DType compute, Device device) {
  const Tensor& x = b.images;
  EMBER_CHECK(x.defined() && x.dtype() == DType::u8 && x.ndim() == 4 && x.device().is_cpu(),
              "mix_batch: images must be u8 [B, C, H, W] on the CPU, got ", x.defined() ? x.str() : "undefined");
  const int64_t B = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  EMBER_CHECK(b.labels.defined() && b.labels.dtype() == DType::i64 && b.labels.shape() == Shape{B} &&
                  b.labels.device().is_cpu(),
              "mix_batch: labels must be i64 [", B, "] on the CPU, got ",
              b.labels.defined() ? b.labels.str() : "undefined");
  EMBER_CHECK(is_floating(compute), "mix_batch: the compute dtype must be f32, f64, f16 or bf16, got ",
              dtype_name(compute));

  const MixDraw d = draw_mix(o, seed, step, H, W);
  MixedBatch m;
  m.kind = d.kind;
  m.lam = d.lam;
  m.box = d.box;
  m.labels_a = b.labels.to(device);
  if (d.kind == MixKind::none) {
    m.labels_b = m.labels_a;
    m.images = x.to(device);
    return m;
  }

  Tensor rev_labels = Tensor::empty({B}, DType::i64);
  const int64_t* la = b.labels.data<int64_t>();
  for (int64_t i = 0; i < B; ++i) rev_labels.data<int64_t>()[i] = la[B - 1 - i];
  m.labels_b = rev_labels.to(device);

  const uint8_t* src = x.data<uint8_t>();
  const int64_t sample = C * H * W;
  if (d.kind == MixKind::cutmix) {
    Tensor out = x.clone();
    uint8_t* dst = out.data<uint8_t>();
    const CutBox& box = d.box;
    const size_t width = size_t(box.x1 - box.x0);
    if (width > 0)
      for (int64_t i = 0; i < B; ++i)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t y = box.y0; y < box.y1; ++y) {
            const int64_t at = (c * H + y) * W + box.x0;
            std::memcpy(dst + i * sample + at, src + (B - 1 - i) * sample + at, width);
          }
    m.images = out.to(device);
    return m;
  }

  // mixup: lam * normalize(x) + (1 - lam) * normalize(x reversed), on the device.
  Tensor reversed = Tensor::empty(x.shape(), DType::u8);
  uint8_t* rp = reversed.data<uint8_t>();
  for (int64_t i = 0; i < B; ++i) std::memcpy(rp + i * sample, src + (B - 1 - i) * sample, size_t(sample));
  NoGradGuard no_grad;
  const DType work = compute == DType::f64 ? DType::f64 : DType::f32;
  Tensor mixed = ops::scale(ops::normalize_u8(x.to(device), norm, work), d.lam);
  ops::add_(mixed, ops::normalize_u8(reversed.to(device), norm, work), 1.0 - d.lam);
  m.images = ops::cast(mixed, compute);
  return m;
}

Tensor mixed_cross_entropy(const Tensor& logits, const MixedBatch& m, double label_smoothing) {
  EMBER_CHECK(m.lam >= 0 && m.lam <= 1, "mixed_cross_entropy: lam ", m.lam, " outside [0, 1]");
  const Tensor ce_a = ops::cross_entropy(logits, m.labels_a, label_smoothing);
  if (m.lam == 1.0) return ce_a;
  const Tensor ce_b = ops::cross_entropy(logits, m.labels_b, label_smoothing);
  if (m.lam == 0.0) return ce_b;
  return ops::add(ops::scale(ce_a, m.lam), ops::scale(ce_b, 1.0 - m.lam));
}

}  // namespace ember::net
