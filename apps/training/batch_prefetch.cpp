// apps/training/batch_prefetch.cpp — BatchPrefetcher (see batch_prefetch.h).
#include "apps/training/batch_prefetch.h"

#include <utility>

#include "engine/memory.h"

namespace ember::apps {

BatchPrefetcher::BatchPrefetcher(BatchSource& source, Device device, bool upload)
    : source_(source), device_(device), upload_(upload && !device.is_cpu()) {}

void BatchPrefetcher::start_epoch(int epoch, int64_t first_batch) {
  // A batch fetched ahead and never used (the last epoch was interrupted)
  // is dropped; its device memory may be freed at once (cuda/allocator.h).
  has_ahead_ = false;
  exhausted_ = false;
  ahead_host_ = data::Batch{};
  ahead_device_ = DeviceBatch{};
  source_.start_epoch(epoch, first_batch);
}

void BatchPrefetcher::fetch_ahead() {
  has_ahead_ = !exhausted_ && source_.next(ahead_host_);
  exhausted_ = !has_ahead_;
  if (!has_ahead_) return;
  ahead_device_.images = ahead_host_.images.to_ahead(device_);
  ahead_device_.labels = ahead_host_.labels.to_ahead(device_);
}

bool BatchPrefetcher::next(data::Batch& host, DeviceBatch& on_device) {
  if (!upload_) {
    on_device = DeviceBatch{};
    return source_.next(host);
  }
  if (!has_ahead_) fetch_ahead();  // the first batch of an epoch
  if (!has_ahead_) return false;
  host = std::move(ahead_host_);
  on_device = std::move(ahead_device_);
  has_ahead_ = false;
  // This batch's copies are ordered before the step's work; the next batch's
  // copy is queued after that, so it waits for nothing of this step.
  finish_copies_ahead(device_);
  fetch_ahead();
  return true;
}

}  // namespace ember::apps
