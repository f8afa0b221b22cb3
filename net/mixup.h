// net/mixup.h — mixup and cutmix of a training batch (timm's Mixup with
// mode "batch"), and the loss of a mixed batch.
//
// The training loop calls mix_batch once per step on the loader's batch and
// mixed_cross_entropy on the model's logits:
//   * pairing: sample i is mixed with sample B-1-i of the same batch (timm's
//     "flip" of the batch, no second shuffle; the middle sample of an odd
//     batch meets itself);
//   * lam ~ Beta(alpha, alpha); with both alphas > 0 each step picks cutmix
//     with p = 0.5, else mixup (timm's switch_prob 0.5);
//   * mixup: images = lam * normalize(x) + (1 - lam) * normalize(x_reversed),
//     a float tensor in the compute dtype (the model takes normalised float
//     input as it is);
//   * cutmix: a box of x_reversed pasted into x (u8; the model normalises it),
//     the box from timm's rand_bbox (cut ratio sqrt(1 - lam), centre uniform,
//     clipped to the image), then lam = 1 - box area / image area;
//   * loss: lam * CE(logits, labels_a) + (1 - lam) * CE(logits, labels_b).
// Every random draw of a step comes from one Philox stream keyed by the seed
// with the stream id mix_stream_id(step) (tag 3 of data/batch_iterator.h's
// scheme), so a run resumed at global step s draws the lam, kind and box it
// drew the first time, whatever the thread count, batch size or rank.
#pragma once
#include <cstdint>

#include "data/batch_iterator.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "ops/kernels.h"

namespace ember::net {

struct MixOptions {
  double mixup_alpha = 0;   // > 0: mixup with lam ~ Beta(mixup_alpha, mixup_alpha); 0: off
  double cutmix_alpha = 0;  // > 0: cutmix with lam ~ Beta(cutmix_alpha, cutmix_alpha); 0: off
  bool enabled() const { return mixup_alpha > 0 || cutmix_alpha > 0; }
};

enum class MixKind { none, mixup, cutmix };
const char* mix_kind_name(MixKind kind);  // "none", "mixup", "cutmix"

// Rows [y0, y1) and columns [x0, x1) of the image (empty when y0 == y1 or x0 == x1).
struct CutBox {
  int64_t y0 = 0, y1 = 0, x0 = 0, x1 = 0;
  int64_t area() const { return (y1 - y0) * (x1 - x0); }
  bool operator==(const CutBox&) const = default;
};

// What one step draws: the kind, lam and (cutmix) the box.
struct MixDraw {
  MixKind kind = MixKind::none;
  double lam = 1.0;  // the weight of labels_a (after the box's clipping, for cutmix)
  CutBox box;        // cutmix only
};

struct MixedBatch {
  Tensor images;    // mixup: [B, C, H, W] in the compute dtype; cutmix / none: u8 [B, C, H, W]; on the device
  Tensor labels_a;  // i64 [B] on the device: the batch's labels
  Tensor labels_b;  // i64 [B] on the device: the labels reversed (sample B-1-i's)
  double lam = 1.0;
  MixKind kind = MixKind::none;
  CutBox box;  // cutmix: the pasted region
};

// The Philox stream id of global step `step` (0 <= step < 2^56):
// 3 << 62 | 0 << 56 | step (bits 56-61: the use, 0 = mixup/cutmix).
uint64_t mix_stream_id(int64_t step);

// Samples of the Gamma(a, 1) and Beta(a, b) distributions (a, b > 0, else an
// error): Marsaglia-Tsang with normals by Box-Muller from the stream's words;
// for a < 1, Gamma(a + 1) * U^(1/a). Beta is X / (X + Y), X ~ Gamma(a),
// Y ~ Gamma(b), computed from their logarithms so that tiny a cannot give 0/0.
double sample_gamma(PhiloxStream& rng, double a);
double sample_beta(PhiloxStream& rng, double a, double b);

// timm's rand_bbox for an H x W image: cut_h = int(H * sqrt(1 - lam)), cut_w
// likewise, centre (cy, cx) uniform over the pixels, box [cy - cut_h / 2,
// cy + cut_h / 2) x [cx - cut_w / 2, cx + cut_w / 2) clipped to the image.
CutBox cutmix_box(double lam, int64_t H, int64_t W, PhiloxStream& rng);

// The draws of step `step` for H x W images: none when both alphas are 0;
// otherwise (both > 0: cutmix when the first uniform is < 0.5) lam from
// Beta(alpha, alpha), and for cutmix the box, with lam then 1 - area / (H W).
// Negative alphas are an error.
MixDraw draw_mix(const MixOptions& o, uint64_t seed, int64_t step, int64_t H, int64_t W);

// Mixes batch b (u8 [B, C, H, W] images, i64 [B] labels, on the CPU) as
// draw_mix(o, seed, step, H, W) says. mixup normalises both images with
// `norm` (as ResNet::forward would, ResNetConfig::input_norm) on `device`,
// mixes in f32 (f64 for an f64 compute) and casts once to `compute`, with no
// autograd recording; cutmix pastes on the host and moves the u8 result;
// none moves the batch as it is. b is not modified.
MixedBatch mix_batch(const data::Batch& b, const MixOptions& o, uint64_t seed, int64_t step, const ChannelNorm& norm,
                     DType compute, Device device);

// lam * CE(logits, labels_a) + (1 - lam) * CE(logits, labels_b), each mean
// over the batch with label smoothing (ops::cross_entropy); differentiable in
// logits. lam == 1 (none, or an empty cutmix box) is CE(logits, labels_a) alone.
//   logits: [B, classes] -> [1] (f32 for 16-bit logits, as ops::cross_entropy)
Tensor mixed_cross_entropy(const Tensor& logits, const MixedBatch& m, double label_smoothing);

}  // namespace ember::net
