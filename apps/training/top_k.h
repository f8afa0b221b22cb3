// apps/training/top_k.h — the most probable classes of one row of logits:
// softmax (in double) and the k best, for build/predict's output and its
// top-1/top-5 accuracy.
#pragma once
#include <cstdint>
#include <vector>

namespace ember::apps {

struct ClassScore {
  int64_t index = 0;
  double prob = 0;  // softmax probability
};

// The min(k, classes) most probable classes of `logits` (classes values),
// most probable first; equal logits rank the lower index first. The
// softmax subtracts the largest logit first, so large logits do not
// overflow. Requires classes >= 1 and k >= 1.
std::vector<ClassScore> softmax_top_k(const float* logits, int64_t classes, int64_t k);

// Whether `label` is among the k best: fewer than k other classes have a
// logit at least as large. A tie with the label's logit counts against it,
// so an output that says nothing (all logits equal) scores no hit. The rule
// of every top-1/top-5 accuracy ember prints (fit's validation, predict).
bool in_top_k(const float* logits, int64_t classes, int64_t k, int64_t label);

}  // namespace ember::apps
