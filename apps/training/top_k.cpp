// apps/training/top_k.cpp — softmax and the k most probable classes.
#include "apps/training/top_k.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/error.h"

namespace ember::apps {

namespace {

// Class a ranks before class b: larger logit, or the same and a lower index.
bool ranks_before(const float* logits, int64_t a, int64_t b) {
  return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

}  // namespace

std::vector<ClassScore> softmax_top_k(const float* logits, int64_t classes, int64_t k) {
  EMBER_CHECK(classes >= 1 && k >= 1, "top-k: ", classes, " classes, k ", k);
  k = std::min(k, classes);
  for (int64_t c = 0; c < classes; ++c)
    EMBER_CHECK(std::isfinite(logits[c]), "top-k: logit ", c, " is ", logits[c], " (the model's output is not finite)");
  const double top = *std::max_element(logits, logits + classes);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(double(logits[c]) - top);
  std::vector<int64_t> order(static_cast<size_t>(classes));
  std::iota(order.begin(), order.end(), int64_t(0));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int64_t a, int64_t b) { return ranks_before(logits, a, b); });
  std::vector<ClassScore> out(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const int64_t c = order[size_t(i)];
    out[size_t(i)] = {c, std::exp(double(logits[c]) - top) / sum};
  }
  return out;
}

bool in_top_k(const float* logits, int64_t classes, int64_t k, int64_t label) {
  if (label < 0 || label >= classes) return false;
  const float target = logits[label];
  int64_t ahead = 0;  // other classes at or above the label's logit
  for (int64_t c = 0; c < classes && ahead < k; ++c) ahead += c != label && logits[c] >= target;
  return ahead < k;
}

}  // namespace ember::apps
