// data/image_loader.cpp — the threaded record loader (data/image_loader.h).
//
// Design:
//   * opt.threads worker threads live as long as the loader. Each keeps its
//     own Record and Image buffers, so the per-sample path reuses every
//     buffer the size of an image (the decoders still malloc inside, and
//     resize_to_planar its small axis tables: reusing those measured no
//     faster).
//   * An encoded sample's crop box is drawn from its header's size before
//     anything is decoded, so a JPEG decodes only what the crop needs, at a
//     reduced scale where the output is small enough (data/image.h
//     decode_for_resize); the box and flip are the same draws as on a fully
//     decoded image, and no decode depends on which thread runs it.
//   * An epoch is this rank's list of sample positions (epoch_order +
//     shard_order, cut by drop_last), split into batches of batch_size and
//     windows of prefetch_batches batches. Within each window the positions
//     are sorted by (shard, file offset): the "claim list". Workers take the
//     next claim with one atomic fetch_add and write the sample straight into
//     its own slot of its batch's tensors, so output order never depends on
//     which thread decoded what.
//   * Batches live in a ring of 2 * prefetch_batches slots (one window being
//     consumed, the next being decoded). A worker may fill batch k only once
//     k < taken + ring, taken being the number of batches handed out; it
//     sleeps on a condition variable otherwise (no spinning). Each slot counts
//     its missing samples atomically; the worker that completes a batch marks
//     it ready under the mutex and wakes the consumer. next() hands batches
//     out strictly in order, then re-arms the slot with fresh tensors for
//     batch k + ring before publishing taken = k + 1.
//   * start_epoch() raises an abort flag, waits until every worker has left
//     the epoch (each finishes at most the sample in hand), then installs the
//     new epoch and wakes them. The destructor does the same and joins.
//   * A failing sample is recorded in its slot; next() rethrows its message
//     (or, with skip_bad, drops it from the batch, counts it and warns).
#include "data/image_loader.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <system_error>
#include <utility>

#include "data/augment.h"
#include "data/augment_rrc.h"
#include "data/image.h"
#include "engine/error.h"
#include "engine/rng.h"

namespace ember::data {
namespace {

constexpr int kMaxEpoch = (1 << 22) - 1;

// Parses all of `text` as a decimal int; false on anything else.
bool parse_int(const std::string& text, int& value) {
  size_t a = 0, b = text.size();
  while (a < b && text[a] == ' ') ++a;
  while (b > a && text[b - 1] == ' ') --b;
  if (a == b) return false;
  const char* first = text.data() + a;
  const char* last = text.data() + b;
  const auto r = std::from_chars(first, last, value);
  return r.ec == std::errc() && r.ptr == last;
}

// Converts an interleaved image with `from` channels (1..4) to `to` (1 or 3)
// channels the way stb_image does: grey = (77 r + 150 g + 29 b) >> 8,
// grey to RGB replicates, alpha is dropped.
void convert_channels(const uint8_t* src, int height, int width, int from, int to, Image& out) {
  out.height = height, out.width = width, out.channels = to;
  const size_t n = size_t(height) * size_t(width);
  out.pixels.resize(n * size_t(to));
  uint8_t* dst = out.pixels.data();
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = src + i * size_t(from);
    if (to == 1) {
      dst[i] = from >= 3 ? uint8_t((p[0] * 77 + p[1] * 150 + p[2] * 29) >> 8) : p[0];
    } else if (from >= 3) {
      dst[3 * i] = p[0], dst[3 * i + 1] = p[1], dst[3 * i + 2] = p[2];
    } else {
      dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = p[0];
    }
  }
}

// Copies the H x W window of src at (dy, dx) into out (same size as src),
// zero outside src: the image padded with zeros and cropped (data/augment.h).
void padded_window(const Image& src, int dy, int dx, Image& out) {
  const int H = src.height, W = src.width, C = src.channels;
  out.height = H, out.width = W, out.channels = C;
  const size_t row_bytes = size_t(W) * size_t(C);
  out.pixels.resize(size_t(H) * row_bytes);
  const int x0 = std::clamp(-dx, 0, W), x1 = std::clamp(W - dx, x0, W);  // output columns read from src
  for (int y = 0; y < H; ++y) {
    uint8_t* row = out.pixels.data() + size_t(y) * row_bytes;
    const int sy = y + dy;
    if (sy < 0 || sy >= H || x1 <= x0) {
      std::memset(row, 0, row_bytes);
      continue;
    }
    std::memset(row, 0, size_t(x0) * size_t(C));
    std::memcpy(row + size_t(x0) * size_t(C),
                src.pixels.data() + (size_t(sy) * size_t(W) + size_t(x0 + dx)) * size_t(C),
                size_t(x1 - x0) * size_t(C));
    std::memset(row + size_t(x1) * size_t(C), 0, size_t(W - x1) * size_t(C));
  }
}

}  // namespace

std::vector<std::pair<int, int>> parse_size_schedule(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t colon = part.find(':');
    EMBER_CHECK(colon != std::string::npos, "size schedule '", text, "': part '", part, "' is not EPOCH:SIZE");
    int epoch = 0, size = 0;
    EMBER_CHECK(parse_int(part.substr(0, colon), epoch) && parse_int(part.substr(colon + 1), size), "size schedule '",
                text, "': part '", part, "' is not EPOCH:SIZE with integers");
    EMBER_CHECK(epoch >= 0, "size schedule '", text, "': epoch ", epoch, " is negative");
    EMBER_CHECK(size > 0, "size schedule '", text, "': size ", size, " must be positive");
    EMBER_CHECK(out.empty() || epoch > out.back().first, "size schedule '", text, "': epoch ", epoch,
                " does not come after epoch ", out.empty() ? 0 : out.back().first);
    out.emplace_back(epoch, size);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<int64_t> window_read_order(const RecordDataset& data, const std::vector<int64_t>& order, int64_t window) {
  EMBER_CHECK(window > 0, "window_read_order: window ", window, " must be positive");
  struct Key {
    uint64_t shard, offset;
    int64_t pos;
  };
  const int64_t n = int64_t(order.size());
  std::vector<Key> keys(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) {
    const int64_t index = order[size_t(p)];
    keys[size_t(p)] = {uint64_t(data.locate(index).first), data.entry(index).offset, p};
  }
  for (int64_t lo = 0; lo < n; lo += window) {
    const int64_t hi = std::min(n, lo + window);
    std::sort(keys.begin() + lo, keys.begin() + hi, [](const Key& a, const Key& b) {
      return a.shard != b.shard ? a.shard < b.shard : a.offset != b.offset ? a.offset < b.offset : a.pos < b.pos;
    });
  }
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) out[size_t(p)] = keys[size_t(p)].pos;
  return out;
}

// One batch in the ring.
struct LoaderSlot {
  Tensor images, labels;  // written by the consumer only while no worker may use the slot
  uint8_t* image_data = nullptr;
  int64_t* label_data = nullptr;
  int64_t size = 0;
  std::atomic<int64_t> missing{0};                      // samples not yet written
  bool ready = false;                                   // guarded by Impl::mu
  std::vector<std::pair<int64_t, std::string>> errors;  // (index in batch, message); guarded by mu
};

// A worker's reusable buffers.
struct WorkerBuffers {
  Record record;
  DecodedRegion region;  // region.image: the decoded (or raw) image
  Image scratch;
};

struct ImageLoader::Impl {
  const RecordDataset& data;
  const LoaderOptions opt;
  std::vector<std::thread> threads;

  std::mutex mu;
  std::condition_variable work_cv;   // workers: a new epoch or shutdown
  std::condition_variable slot_cv;   // workers: a ring slot freed, or abort
  std::condition_variable ready_cv;  // consumer: a batch completed
  std::condition_variable idle_cv;   // start_epoch: the last worker left the epoch
  bool shutdown = false;             // guarded by mu
  bool live = false;                 // guarded by mu: workers may work on the epoch
  int64_t generation = 0;            // guarded by mu: bumped per epoch
  int active = 0;                    // guarded by mu: workers inside an epoch
  std::atomic<bool> abort{false};

  // The epoch; written only while no worker is active.
  bool started = false;
  int epoch = 0;
  int size = 0;                      // output side
  int val_resize = 0;                // validation: the short side the centre crop is taken from
  int64_t samples = 0, batches = 0;  // this rank's, after drop_last
  std::vector<int64_t> order;        // dataset index per position
  std::vector<int64_t> claims;       // positions, sorted by (shard, offset) within each window
  std::atomic<int64_t> next_claim{0};
  std::atomic<int64_t> taken{0};  // batches handed to the consumer (stored under mu)
  int64_t ring = 0;
  std::unique_ptr<LoaderSlot[]> slots;
  std::atomic<int64_t> bad{0};

  Impl(const RecordDataset& d, const LoaderOptions& o) : data(d), opt(o) {}

  int64_t sample_bytes() const { return int64_t(opt.channels) * size * size; }

  // Gives slot k % ring fresh tensors for batch k (no worker may touch it now).
  void arm(int64_t k) {
    LoaderSlot& s = slots[size_t(k % ring)];
    const int64_t b = std::min(opt.batch_size, samples - k * opt.batch_size);
    s.images = Tensor::empty({b, int64_t(opt.channels), int64_t(size), int64_t(size)}, DType::u8);
    s.labels = Tensor::empty({b}, DType::i64);
    s.image_data = s.images.data<uint8_t>();
    s.label_data = s.labels.data<int64_t>();
    s.size = b;
    s.missing.store(b, std::memory_order_relaxed);
    s.ready = false;
    s.errors.clear();
  }

  // Stops the workers' current epoch and waits until none is inside it.
  void stop_workers() {
    std::unique_lock<std::mutex> lock(mu);
    live = false;
    abort.store(true);
    slot_cv.notify_all();
    idle_cv.wait(lock, [&] { return active == 0; });
  }

  void worker_main() {
    WorkerBuffers buf;
    int64_t done = 0;  // the last generation this worker finished
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      work_cv.wait(lock, [&] { return shutdown || (live && generation != done); });
      if (shutdown) return;
      const int64_t gen = generation;
      ++active;
      lock.unlock();
      run_epoch(buf);
      lock.lock();
      done = gen;
      if (--active == 0) idle_cv.notify_all();
    }
  }

  // Claims and loads samples until the epoch's claims run out or it is aborted.
  void run_epoch(WorkerBuffers& buf) {
    const int64_t B = opt.batch_size;
    for (;;) {
      if (abort.load(std::memory_order_relaxed)) return;
      const int64_t c = next_claim.fetch_add(1, std::memory_order_relaxed);
      if (c >= int64_t(claims.size())) return;
      const int64_t pos = claims[size_t(c)];
      const int64_t k = pos / B;
      if (k >= taken.load(std::memory_order_acquire) + ring) {
        std::unique_lock<std::mutex> lock(mu);
        slot_cv.wait(lock, [&] { return abort.load() || k < taken.load() + ring; });
        if (abort.load()) return;
      }
      LoaderSlot& s = slots[size_t(k % ring)];
      const int64_t j = pos - k * B;
      std::string error;
      try {
        load_sample(order[size_t(pos)], s.image_data + j * sample_bytes(), s.label_data[j], buf);
      } catch (const std::exception& e) {
        error = e.what();
        if (error.empty()) error = "unknown error";
      } catch (...) {
        error = "unknown error";
      }
      if (!error.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        s.errors.emplace_back(j, std::move(error));
      }
      if (s.missing.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu);
        s.ready = true;
        ready_cv.notify_all();
      }
    }
  }

  // "shard.erec: record 12 (id 3012) at offset 123456", as RecordFile::read names records.
  std::string describe(int64_t index, const Record& rec) const {
    const auto [shard, local] = data.locate(index);
    return cat(data.shard(shard).path(), ": record ", local, " (id ", rec.id, ") at offset ", data.entry(index).offset);
  }

  // Reads, decodes, augments and resizes dataset record `index` into dst
  // (C planes of size x size) and its label. Errors name the record.
  void load_sample(int64_t index, uint8_t* dst, int64_t& label, WorkerBuffers& buf) const {
    Record& rec = buf.record;
    data.read(index, rec);  // its errors name file, record and offset
    try {
      decode_crop_resize(index, dst, buf);
    } catch (const Error& e) {
      // Naming the record costs a string, so it is only built on failure.
      std::string what = e.what();
      if (what.rfind(": ", 0) == 0) what.erase(0, 2);  // decode_image's messages, with an empty `what`
      fail(describe(index, rec) + ": " + what);
    }
    label = rec.label;
  }

  // The sample's crop box on a height x width image and its flip, drawn
  // from the sample's own stream (validation: the centre crop, no flip).
  // pad_crop draws its shift in decode_crop_resize instead.
  void crop_and_flip(int64_t index, int height, int width, Box& box, bool& flip) const {
    box = Box{0, 0, width, height};
    flip = false;
    if (opt.validation) {
      box = validation_crop_box(height, width, size, val_resize);
      return;
    }
    PhiloxStream rng(opt.seed, sample_stream_id(epoch, index));
    if (opt.augment == Augment::random_resized_crop)
      box = random_resized_crop_box(height, width, opt.min_area, opt.max_area, opt.min_ratio, opt.max_ratio, rng);
    if (opt.flip) flip = (rng.next_u32() >> 31) != 0;
  }

  void decode_crop_resize(int64_t index, uint8_t* dst, WorkerBuffers& buf) const {
    Record& rec = buf.record;
    const int C = opt.channels;
    const bool pad_crop = !opt.validation && opt.augment == Augment::pad_crop;
    if (rec.encoding != Encoding::raw && !pad_crop) {
      // Encoded images: the box comes from the header's size, then only what
      // resizing it needs is decoded (with libjpeg-turbo: a reduced scale
      // and the iMCU rows and columns holding the box; data/image.h).
      const ImageInfo info = probe_image(rec.payload.data(), rec.payload.size(), "");
      Box box;
      bool flip = false;
      crop_and_flip(index, info.height, info.width, box, flip);
      decode_for_resize(rec.payload.data(), rec.payload.size(), C, box, size, size, buf.region, "");
      resize_region_to_planar(buf.region, box, size, size, flip, dst);
      return;
    }
    Image& img = buf.region.image;
    if (rec.encoding == Encoding::raw) {
      const uint64_t h = rec.height, w = rec.width, c = rec.channels;
      EMBER_CHECK(h > 0 && w > 0 && c >= 1 && c <= 4 && h * w <= (uint64_t(1) << 30) && rec.payload.size() == h * w * c,
                  "raw image ", h, "x", w, "x", c, " does not match its ", rec.payload.size(), " payload bytes");
      if (int(c) == C) {
        img.height = int(h), img.width = int(w), img.channels = C;
        std::swap(img.pixels, rec.payload);  // both buffers keep their capacity
      } else {
        convert_channels(rec.payload.data(), int(h), int(w), int(c), C, img);
      }
    } else {
      decode_image(rec.payload.data(), rec.payload.size(), C, img, "");
    }

    Box box;
    bool flip = false;
    const Image* src = &img;
    if (pad_crop) {
      PhiloxStream rng(opt.seed, sample_stream_id(epoch, index));
      const AugmentParams p = draw_augment(rng, opt.pad, opt.flip);
      flip = p.flip;
      box = Box{0, 0, img.width, img.height};
      if (p.dx != 0 || p.dy != 0) {
        padded_window(img, p.dy, p.dx, buf.scratch);
        src = &buf.scratch;
      }
    } else {
      crop_and_flip(index, img.height, img.width, box, flip);
    }
    resize_to_planar(*src, box, size, size, flip, dst);
  }
};

ImageLoader::ImageLoader(const RecordDataset& data, LoaderOptions options) : opt_(std::move(options)) {
  EMBER_CHECK(data.size() > 0, "image loader: the data set has no records");
  EMBER_CHECK(opt_.batch_size > 0, "image loader: batch size ", opt_.batch_size, " must be positive");
  EMBER_CHECK(opt_.threads >= 1, "image loader: ", opt_.threads, " threads (need at least 1)");
  EMBER_CHECK(opt_.prefetch_batches >= 1, "image loader: prefetch ", opt_.prefetch_batches,
              " batches (need at least 1)");
  EMBER_CHECK(opt_.world >= 1 && opt_.rank >= 0 && opt_.rank < opt_.world, "image loader: rank ", opt_.rank,
              " of world ", opt_.world);
  EMBER_CHECK(opt_.channels == 1 || opt_.channels == 3, "image loader: channels ", opt_.channels, " (1 or 3)");
  EMBER_CHECK(opt_.output_size > 0, "image loader: output size ", opt_.output_size, " must be positive");
  for (size_t i = 0; i < opt_.size_schedule.size(); ++i) {
    const auto [e, s] = opt_.size_schedule[i];
    EMBER_CHECK(s > 0 && e >= 0 && (i == 0 || e > opt_.size_schedule[i - 1].first),
                "image loader: bad size schedule entry ", e, ":", s);
  }
  EMBER_CHECK(opt_.pad >= 0, "image loader: negative crop padding ", opt_.pad);
  EMBER_CHECK(opt_.val_resize >= 0, "image loader: negative validation resize ", opt_.val_resize);
  if (!opt_.validation && opt_.augment == Augment::random_resized_crop) {
    EMBER_CHECK(opt_.min_area > 0 && opt_.min_area <= opt_.max_area, "image loader: area range [", opt_.min_area, ", ",
                opt_.max_area, "] needs 0 < min <= max");
    EMBER_CHECK(opt_.min_ratio > 0 && opt_.min_ratio <= opt_.max_ratio, "image loader: ratio range [", opt_.min_ratio,
                ", ", opt_.max_ratio, "] needs 0 < min <= max");
  }
  impl_ = std::make_unique<Impl>(data, opt_);
  impl_->ring = 2 * int64_t(opt_.prefetch_batches);
  impl_->slots = std::make_unique<LoaderSlot[]>(size_t(impl_->ring));
  try {
    for (int t = 0; t < opt_.threads; ++t) impl_->threads.emplace_back([this] { impl_->worker_main(); });
  } catch (const std::system_error& e) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->shutdown = true;
    }
    impl_->work_cv.notify_all();
    for (auto& t : impl_->threads) t.join();
    fail(cat("image loader: cannot start ", opt_.threads, " threads (", e.what(), ")"));
  }
}

ImageLoader::~ImageLoader() {
  impl_->stop_workers();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->shutdown = true;
  }
  impl_->work_cv.notify_all();
  for (auto& t : impl_->threads) t.join();
}

int ImageLoader::output_size(int epoch) const {
  int s = opt_.output_size;
  for (const auto& [first, size] : opt_.size_schedule)
    if (epoch >= first) s = size;
  return s;
}

int64_t ImageLoader::samples_per_epoch() const {
  const int64_t per_rank = shard_size(int64_t(impl_->data.size()), opt_.rank, opt_.world, opt_.even_shards);
  return opt_.drop_last ? per_rank / opt_.batch_size * opt_.batch_size : per_rank;
}

int64_t ImageLoader::batches_per_epoch() const { return (samples_per_epoch() + opt_.batch_size - 1) / opt_.batch_size; }

int64_t ImageLoader::bad_records() const { return impl_->bad.load(); }

int64_t ImageLoader::position() const { return impl_->started ? impl_->taken.load() : 0; }

void ImageLoader::start_epoch(int epoch, int64_t first_batch) {
  EMBER_CHECK(epoch >= 0 && epoch <= kMaxEpoch, "image loader: epoch ", epoch, " outside [0, ", kMaxEpoch, "]");
  EMBER_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(), "image loader: batch ", first_batch,
              " is outside epoch ", epoch, "'s ", batches_per_epoch(), " batches");
  Impl& m = *impl_;
  m.stop_workers();
  // No worker is inside an epoch now and none enters until `live` is set
  // again. Should anything below throw, next() sees an empty epoch.
  m.started = true;
  m.batches = 0;
  m.taken.store(0);
  const bool shuffle = opt_.shuffle && !opt_.validation;
  std::vector<int64_t> order =
      shard_order(epoch_order(m.data.size(), shuffle, opt_.seed, epoch), opt_.rank, opt_.world, opt_.even_shards);
  order.resize(size_t(samples_per_epoch()));
  m.claims = window_read_order(m.data, order, int64_t(opt_.prefetch_batches) * opt_.batch_size);
  // Resuming mid-epoch: the positions before first_batch are not loaded
  // (the windows keep their read order; a batch's samples still come from
  // their own Philox streams, so the batches are those of a whole epoch).
  const int64_t first_pos = first_batch * opt_.batch_size;
  if (first_pos > 0)
    std::erase_if(m.claims, [&](int64_t pos) { return pos < first_pos; });
  m.order = std::move(order);
  m.epoch = epoch;
  m.size = output_size(epoch);
  m.val_resize = validation_resize(m.size, opt_.val_resize);
  m.samples = samples_per_epoch();
  m.next_claim.store(0);
  m.taken.store(first_batch);
  const int64_t batches = batches_per_epoch();
  for (int64_t k = first_batch; k < std::min(first_batch + m.ring, batches); ++k) m.arm(k);
  m.batches = batches;
  {
    std::lock_guard<std::mutex> lock(m.mu);
    m.abort.store(false);
    m.live = true;
    ++m.generation;
  }
  m.work_cv.notify_all();
}

bool ImageLoader::next(Batch& batch) {
  Impl& m = *impl_;
  if (!m.started) start_epoch(0);
  for (;;) {
    const int64_t k = m.taken.load();
    if (k >= m.batches) return false;
    LoaderSlot& s = m.slots[size_t(k % m.ring)];
    std::vector<std::pair<int64_t, std::string>> errors;
    {
      std::unique_lock<std::mutex> lock(m.mu);
      m.ready_cv.wait(lock, [&] { return s.ready; });
      s.ready = false;
      errors.swap(s.errors);
    }
    Tensor images = std::move(s.images), labels = std::move(s.labels);
    int64_t b = s.size;
    if (k + m.ring < m.batches) m.arm(k + m.ring);
    {
      std::lock_guard<std::mutex> lock(m.mu);
      m.taken.store(k + 1);
    }
    m.slot_cv.notify_all();

    if (errors.empty()) {
      batch.images = std::move(images);
      batch.labels = std::move(labels);
      batch.size = b;
      return true;
    }
    std::sort(errors.begin(), errors.end());
    if (!opt_.skip_bad) fail(errors.front().second);
    m.bad.fetch_add(int64_t(errors.size()));
    for (const auto& e : errors) std::fprintf(stderr, "warning: skipping %s\n", e.second.c_str());
    // Compact the good samples into smaller tensors.
    const int64_t kept = b - int64_t(errors.size());
    if (kept == 0) continue;  // the whole batch was bad: go on with the next one
    const int64_t bytes = m.sample_bytes();
    Tensor small_images = Tensor::empty({kept, int64_t(opt_.channels), int64_t(m.size), int64_t(m.size)}, DType::u8);
    Tensor small_labels = Tensor::empty({kept}, DType::i64);
    const uint8_t* from = images.data<uint8_t>();
    const int64_t* from_labels = labels.data<int64_t>();
    uint8_t* to = small_images.data<uint8_t>();
    int64_t* to_labels = small_labels.data<int64_t>();
    size_t e = 0;
    int64_t out = 0;
    for (int64_t j = 0; j < b; ++j) {
      if (e < errors.size() && errors[e].first == j) {
        ++e;
        continue;
      }
      std::memcpy(to + out * bytes, from + j * bytes, size_t(bytes));
      to_labels[out++] = from_labels[j];
    }
    batch.images = std::move(small_images);
    batch.labels = std::move(small_labels);
    batch.size = kept;
    return true;
  }
}

}  // namespace ember::data
