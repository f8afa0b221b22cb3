// data/batch_iterator.cpp — epoch order, sharding and parallel batch assembly.
#include "data/batch_iterator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "data/augment.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "engine/rng.h"

namespace ember::data {
namespace {

constexpr int kMaxEpoch = (1 << 22) - 1;
constexpr int64_t kMaxIndex = (int64_t(1) << 40) - 1;

}  // namespace

uint64_t shuffle_stream_id(int epoch) {
  EMBER_CHECK(epoch >= 0 && epoch <= kMaxEpoch, "data: epoch ", epoch, " outside [0, ", kMaxEpoch, "]");
  return uint64_t(2) << 62 | uint64_t(epoch);
}

uint64_t sample_stream_id(int epoch, int64_t index) {
  EMBER_CHECK(epoch >= 0 && epoch <= kMaxEpoch, "data: epoch ", epoch, " outside [0, ", kMaxEpoch, "]");
  EMBER_CHECK(index >= 0 && index <= kMaxIndex, "data: sample index ", index, " outside [0, ", kMaxIndex, "]");
  return uint64_t(1) << 62 | uint64_t(epoch) << 40 | uint64_t(index);
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int epoch) {
  EMBER_CHECK(n >= 0, "data: negative sample count ", n);
  std::vector<int64_t> order(size_t(n), 0);
  for (int64_t i = 0; i < n; ++i) order[size_t(i)] = i;
  if (shuffle) {
    PhiloxStream rng(seed, shuffle_stream_id(epoch));
    for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[rng.below(uint64_t(i) + 1)]);
  }
  return order;
}

int64_t shard_size(int64_t n, int rank, int world, bool even) {
  EMBER_CHECK(world >= 1 && rank >= 0 && rank < world, "data: rank ", rank, " of world ", world);
  if (even) return (n + world - 1) / world;
  return n / world + (rank < n % world ? 1 : 0);
}

std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int world, bool even) {
  const size_t n = order.size();
  const size_t per_rank = size_t(shard_size(int64_t(n), rank, world, even));
  if (n == 0) return {};
  std::vector<int64_t> mine(per_rank);
  for (size_t i = 0; i < per_rank; ++i) mine[i] = order[(size_t(rank) + i * size_t(world)) % n];
  return mine;
}

BatchIterator::BatchIterator(const ImageSet& set, Options options) : set_(set), opt_(options) {
  check_image_set(set_);
  EMBER_CHECK(set_.count > 0, set_.name, ": no images to iterate over");
  EMBER_CHECK(opt_.batch_size > 0, "data: batch size ", opt_.batch_size, " must be positive");
  EMBER_CHECK(opt_.pad >= 0, "data: negative crop padding ", opt_.pad);
  EMBER_CHECK(opt_.world >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world, "data: rank ", opt_.rank,
              " of world ", opt_.world);
  EMBER_CHECK(set_.count - 1 <= kMaxIndex, set_.name, ": too many images (", set_.count, ")");
  start_epoch(0);
}

void BatchIterator::start_epoch(int epoch, int64_t first_batch) {
  EMBER_CHECK(epoch >= 0 && epoch <= kMaxEpoch, "data: epoch ", epoch, " outside [0, ", kMaxEpoch, "]");
  EMBER_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), set_.name, ": batch ", first_batch,
              " is outside epoch ", epoch, "'s ", batches_per_epoch(), " batches");
  epoch_ = epoch;
  order_ = shard_order(epoch_order(set_.count, opt_.shuffle, opt_.seed, epoch), opt_.rank, opt_.world,
                       opt_.even_shards);
  pos_ = std::min(first_batch * opt_.batch_size, samples_per_epoch());
}

int64_t BatchIterator::samples_per_epoch() const {
  const int64_t per_rank = shard_size(set_.count, opt_.rank, opt_.world, opt_.even_shards);
  return opt_.drop_last ? per_rank / opt_.batch_size * opt_.batch_size : per_rank;
}

int64_t BatchIterator::batches_per_epoch() const {
  return (samples_per_epoch() + opt_.batch_size - 1) / opt_.batch_size;
}

bool BatchIterator::next(Batch& batch) {
  const int64_t end = samples_per_epoch();
  if (pos_ >= end) return false;
  const int64_t b = std::min(opt_.batch_size, end - pos_);
  const int64_t C = set_.channels, H = set_.height, W = set_.width, ib = C * H * W;
  batch.images = Tensor::empty({b, C, H, W}, DType::u8);
  batch.labels = Tensor::empty({b}, DType::i64);
  batch.size = b;
  uint8_t* images = batch.images.data<uint8_t>();
  int64_t* labels = batch.labels.data<int64_t>();
  const int64_t* idx = order_.data() + pos_;
  const bool augment = opt_.pad > 0 || opt_.flip;
  parallel_for(0, b, 8, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t s = idx[i];
      const uint8_t* src = set_.pixels.data() + s * ib;
      uint8_t* dst = images + i * ib;
      if (augment) {
        PhiloxStream rng(opt_.seed, sample_stream_id(epoch_, s));
        augment_image(src, dst, C, H, W, opt_.pad, opt_.flip, rng);
      } else {
        std::memcpy(dst, src, size_t(ib));
      }
      labels[i] = set_.labels[size_t(s)];
    }
  });
  pos_ += b;
  return true;
}

}  // namespace ember::data
