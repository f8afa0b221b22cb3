// apps/training/batch_prefetch.h — the training loop's batches with their
// upload to the device started one step early, so that on a GPU the copy of
// batch N+1 runs (on the copy stream) while step N computes.
//
// next() returns batch N, already on the device, and before returning takes
// batch N+1 from the source and queues its upload (Tensor::to_ahead). The
// source is therefore one batch ahead of the training loop: position()
// subtracts that batch, so a checkpoint taken after step N resumes at N+1
// exactly as without the lookahead. On the CPU, or with upload off (mixup
// and cutmix mix on the host), next() is the source's next() and leaves
// the device batch empty.
#pragma once
#include <cstdint>

#include "apps/training/batch_source.h"
#include "engine/tensor.h"

namespace ember::apps {

struct DeviceBatch {
  Tensor images;  // the host batch's images on the device (undefined when not uploaded)
  Tensor labels;
};

class BatchPrefetcher {
 public:
  // upload: copy each batch to `device` one step ahead (a GPU); false:
  // hand out host batches only, taken when asked for.
  BatchPrefetcher(BatchSource& source, Device device, bool upload);
  void start_epoch(int epoch, int64_t first_batch = 0);
  // The next batch of the epoch: `host` as the source gave it and, with
  // upload on, `on_device` ready for any work queued from now on. False at
  // the end of the epoch.
  bool next(data::Batch& host, DeviceBatch& on_device);
  // Batches next() has returned this epoch (counted as the source counts):
  // what start_epoch's first_batch resumes from.
  int64_t position() const { return source_.position() - (has_ahead_ ? 1 : 0); }
  bool uploads() const { return upload_; }

 private:
  // Takes the source's next batch into ahead_ and queues its upload.
  void fetch_ahead();

  BatchSource& source_;
  Device device_;
  bool upload_;
  bool has_ahead_ = false;
  bool exhausted_ = false;  // the source said the epoch is over: not asked again until start_epoch
  data::Batch ahead_host_;
  DeviceBatch ahead_device_;
};

}  // namespace ember::apps
