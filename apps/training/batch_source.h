// apps/training/batch_source.h — what the training loop draws batches from:
// the in-memory iterator of small data sets (data/batch_iterator.h) or the
// threaded record loader (data/image_loader.h), behind one interface.
#pragma once
#include <cstdint>

#include "data/batch_iterator.h"
#include "data/image_loader.h"

namespace ember::apps {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Rewinds to batch `first_batch` of `epoch` (a resumed run starts mid-epoch).
  virtual void start_epoch(int epoch, int64_t first_batch = 0) = 0;
  virtual bool next(data::Batch& batch) = 0;  // false at the end of the epoch
  // Batches of the epoch taken so far (what start_epoch's first_batch resumes from).
  virtual int64_t position() const = 0;
  virtual int64_t batches_per_epoch() const = 0;
  virtual int64_t samples_per_epoch() const = 0;
  virtual int64_t batch_size() const = 0;
  // Side of the square images of `epoch` when it changes between epochs
  // (progressive resizing); 0 when fixed.
  virtual int image_size(int /*epoch*/) const { return 0; }
};

class IteratorSource final : public BatchSource {
 public:
  explicit IteratorSource(data::BatchIterator& it) : it_(it) {}
  void start_epoch(int epoch, int64_t first_batch = 0) override { it_.start_epoch(epoch, first_batch); }
  bool next(data::Batch& b) override { return it_.next(b); }
  int64_t position() const override { return it_.position(); }
  int64_t batches_per_epoch() const override { return it_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return it_.samples_per_epoch(); }
  int64_t batch_size() const override { return it_.options().batch_size; }

 private:
  data::BatchIterator& it_;
};

class LoaderSource final : public BatchSource {
 public:
  explicit LoaderSource(data::ImageLoader& loader) : loader_(loader) {}
  void start_epoch(int epoch, int64_t first_batch = 0) override { loader_.start_epoch(epoch, first_batch); }
  bool next(data::Batch& b) override { return loader_.next(b); }
  int64_t position() const override { return loader_.position(); }
  int64_t batches_per_epoch() const override { return loader_.batches_per_epoch(); }
  int64_t samples_per_epoch() const override { return loader_.samples_per_epoch(); }
  int64_t batch_size() const override { return loader_.options().batch_size; }
  int image_size(int epoch) const override {
    return loader_.options().size_schedule.empty() ? 0 : loader_.output_size(epoch);
  }

 private:
  data::ImageLoader& loader_;
};

}  // namespace ember::apps
