// data/batch_iterator.h — shuffled, sharded, augmented uint8 batches from an
// in-memory ImageSet (Fashion-MNIST and other small sets).
//
// The order of samples follows DESIGN.md "Data":
//   * each epoch has one global permutation of [0, n) computed from
//     (seed, epoch) by Fisher-Yates on a PhiloxStream (identity without shuffle);
//   * rank r of `world` takes positions r, r + world, r + 2*world, ... of it;
//     the permutation is extended by wrapping around to ceil(n / world) * world
//     entries, so every rank gets the same number of samples (and steps);
//   * sample i's augmentation draws from a PhiloxStream seeded from
//     (seed, epoch, i), so a batch does not depend on the thread count, the
//     batch size or the rank that loads it.
// Batch assembly (copy + augment) runs in parallel over samples.
//
// Philox stream ids (key = seed): bits 62-63 tag the use so they never meet
// the tensor Generator's stream 0:
//   shuffle of epoch e            2 << 62 | e
//   augmentation of sample i, e   1 << 62 | e << 40 | i   (e < 2^22, i < 2^40)
//   per training step s           3 << 62 | u << 56 | s   (s < 2^56; u names the use:
//                                 0 = mixup/cutmix, net::mix_stream_id;
//                                 1 = dropout masks, net::set_dropout_step)
#pragma once
#include <cstdint>
#include <vector>

#include "data/image_set.h"
#include "engine/tensor.h"

namespace ember::data {

uint64_t shuffle_stream_id(int epoch);
uint64_t sample_stream_id(int epoch, int64_t index);

// The global order of epoch `epoch`: 0..n-1, or its Fisher-Yates shuffle
// drawn from PhiloxStream(seed, shuffle_stream_id(epoch)).
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, int epoch);

// Rank `rank`'s share of a global order: positions rank, rank + world, ...
// of the order wrapped around to ceil(n / world) * world entries (even:
// every rank the same count, for training), or of the order as it is (each
// sample exactly once over all ranks, for evaluation).
std::vector<int64_t> shard_order(const std::vector<int64_t>& order, int rank, int world, bool even = true);
// How many samples rank `rank` gets of n (shard_order's size).
int64_t shard_size(int64_t n, int rank, int world, bool even = true);

struct Batch {
  Tensor images;     // u8 [B, C, H, W] on the CPU
  Tensor labels;     // i64 [B]
  int64_t size = 0;  // B: batch_size, or fewer for the last batch of an epoch
};

class BatchIterator {
 public:
  struct Options {
    int64_t batch_size = 128;
    bool shuffle = true;
    bool drop_last = false;  // drop this rank's last batch when it is partial
    int pad = 0;             // random crop with `pad` zero pixels each side (0: none)
    bool flip = false;       // random horizontal flip with p = 0.5
    uint64_t seed = 0;
    int rank = 0, world = 1;
    bool even_shards = true;  // false: every sample once over all ranks (evaluation), not padded
  };

  // Keeps a reference to `set`, which must outlive the iterator (and must
  // not change while it is in use). Starts epoch 0.
  BatchIterator(const ImageSet& set, Options options);

  // Computes the order of `epoch` (>= 0) and rewinds to its batch
  // `first_batch` (0: the start; a resumed run continues mid-epoch).
  void start_epoch(int epoch, int64_t first_batch = 0);
  // Batches of the epoch handed out so far (where a resumed run continues).
  int64_t position() const { return (pos_ + opt_.batch_size - 1) / opt_.batch_size; }
  // Fills `batch` with the next batch (fresh tensors each call, so earlier
  // batches stay valid); returns false at the end of the epoch.
  bool next(Batch& batch);

  int64_t batches_per_epoch() const;  // for this rank
  int64_t samples_per_epoch() const;  // for this rank, after drop_last
  int epoch() const { return epoch_; }
  const Options& options() const { return opt_; }

 private:
  const ImageSet& set_;
  Options opt_;
  int epoch_ = 0;
  std::vector<int64_t> order_;  // this rank's sample indices for the epoch
  int64_t pos_ = 0;             // next position in order_
};

}  // namespace ember::data
