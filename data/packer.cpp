// data/packer.cpp — im2rec's packing pipeline (read, decode-check, resize,
// re-encode on worker threads; write in list order on the calling thread),
// output naming, and the full check of a packed file (verify).
#include "data/packer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>
#include <utility>

#include "data/image.h"
#include "data/record_file.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/rng.h"

namespace ember::data {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The Philox stream of the packer's shuffle ("im2rec" in ASCII).
constexpr uint64_t kShuffleStream = 0x696d32726563ull;

// One image after the worker is done with it.
struct Prepared {
  bool ok = false;
  std::string reason;  // when !ok: the error, without the leading "PATH: "
  uint64_t source_bytes = 0;
  uint32_t height = 0, width = 0, channels = 0;
  Encoding encoding = Encoding::jpeg;
  std::vector<uint8_t> payload;
};

// "PATH: reason" -> "reason".
std::string strip_path(const std::string& message, const std::string& path) {
  const std::string prefix = path + ": ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// Settings of the label fields from the items (see pack() in packer.h).
void choose_labels(const std::vector<SourceItem>& items, const std::vector<std::string>& class_names,
                   RecordFileSettings& s) {
  s.class_names = class_names;
  if (!class_names.empty()) {
    for (const auto& it : items)
      EMBER_CHECK(it.labels.size() == 1 && is_class_index(it.labels[0]) && it.labels[0] < float(class_names.size()),
                  it.path, ": needs one class index below ", class_names.size(), " as its label");
    s.label_type = LabelType::class_index;
    s.label_width = 1;
    s.num_classes = uint32_t(class_names.size());
    return;
  }
  bool class_labels = true;
  float max_label = 0;
  for (const auto& it : items) {
    if (it.labels.size() != 1 || !is_class_index(it.labels[0])) {
      class_labels = false;
      break;
    }
    max_label = std::max(max_label, it.labels[0]);
  }
  if (class_labels) {
    s.label_type = LabelType::class_index;
    s.label_width = 1;
    s.num_classes = uint32_t(max_label) + 1;
    return;
  }
  const size_t width = items.front().labels.size();
  EMBER_CHECK(width >= 1, items.front().path, ": has no label");
  for (const auto& it : items)
    EMBER_CHECK(it.labels.size() == width, it.path, ": has ", it.labels.size(), " labels, but ", items.front().path,
                " has ", width, " (every image needs the same number)");
  s.label_type = LabelType::f32_vector;
  s.label_width = uint32_t(width);
  s.num_classes = 0;
}

}  // namespace

bool is_class_index(float v) { return v >= 0 && v < 2147483648.0f && v == std::floor(v); }

void run_ordered(int64_t n, int threads, int64_t window, const std::function<void(int64_t, size_t)>& work,
                 const std::function<void(int64_t, size_t)>& consume) {
  if (n <= 0) return;
  threads = std::max(1, threads);
  window = std::max<int64_t>(window, threads);
  std::mutex m;
  std::condition_variable work_cv, done_cv;
  int64_t next = 0, consumed = 0;
  std::vector<char> ready(size_t(window), 0);
  bool stop = false;
  std::exception_ptr error;
  auto slot_of = [&](int64_t i) { return size_t(i % window); };

  auto worker = [&] {
    while (true) {
      int64_t i;
      {
        std::unique_lock<std::mutex> lock(m);
        work_cv.wait(lock, [&] { return stop || next >= n || next < consumed + window; });
        if (stop || next >= n) return;
        i = next++;
      }
      try {
        work(i, slot_of(i));
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        stop = true;
        work_cv.notify_all();
        done_cv.notify_all();
        return;
      }
      {
        std::lock_guard<std::mutex> lock(m);
        ready[slot_of(i)] = 1;
      }
      done_cv.notify_all();
    }
  };

  // Stops and joins the workers on every way out.
  struct Pool {
    std::vector<std::thread> threads;
    std::mutex& m;
    std::condition_variable& cv;
    bool& stop;
    ~Pool() {
      {
        std::lock_guard<std::mutex> lock(m);
        stop = true;
      }
      cv.notify_all();
      for (auto& t : threads) t.join();
    }
  } pool{{}, m, work_cv, stop};
  for (int t = 0; t < threads; ++t) pool.threads.emplace_back(worker);

  for (int64_t i = 0; i < n; ++i) {
    {
      std::unique_lock<std::mutex> lock(m);
      done_cv.wait(lock, [&] { return error || ready[slot_of(i)]; });
      if (error) break;
    }
    consume(i, slot_of(i));  // an exception here: ~Pool stops the workers
    {
      std::lock_guard<std::mutex> lock(m);
      ready[slot_of(i)] = 0;
      consumed = i + 1;
    }
    work_cv.notify_all();
  }
  if (error) {
    std::exception_ptr e = error;
    {
      std::lock_guard<std::mutex> lock(m);
      stop = true;
    }
    work_cv.notify_all();
    for (auto& t : pool.threads) t.join();
    pool.threads.clear();
    std::rethrow_exception(e);
  }
}

void check_pack_options(const PackOptions& o) {
  EMBER_CHECK(!(o.pass_through && o.resize > 0),
              "pass-through keeps the original bytes and cannot resize (drop --resize or --pass-through)");
  EMBER_CHECK(o.resize >= 0, "resize ", o.resize, " must be >= 0");
  EMBER_CHECK(o.quality >= 1 && o.quality <= 100, "quality ", o.quality, " is not in 1..100");
  EMBER_CHECK(o.channels == 0 || o.channels == 1 || o.channels == 3, "channels ", o.channels,
              " must be 1, 3 or 0 (as stored)");
  EMBER_CHECK(o.threads >= 1, "threads ", o.threads, " must be >= 1");
  EMBER_CHECK(o.train_ratio > 0 && o.train_ratio <= 1, "train ratio ", o.train_ratio, " is not in (0, 1]");
  EMBER_CHECK(o.shards >= 1 && o.shards <= 99999, "shards ", o.shards, " must be in 1..99999");
}

std::vector<std::vector<std::string>> pack_output_names(const std::string& prefix, const PackOptions& o) {
  const bool split = o.train_ratio < 1;
  std::vector<std::string> bases =
      split ? std::vector<std::string>{prefix + "_train", prefix + "_val"} : std::vector<std::string>{prefix};
  std::vector<std::vector<std::string>> names;
  for (const auto& base : bases) {
    std::vector<std::string> files;
    if (o.shards == 1) {
      files.push_back(base + ".erec");
    } else {
      for (int k = 0; k < o.shards; ++k) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "-%05d-of-%05d.erec", k, o.shards);
        files.push_back(base + buf);
      }
    }
    names.push_back(std::move(files));
  }
  return names;
}

PackReport pack(const std::vector<SourceItem>& items, const std::vector<std::string>& class_names,
                const std::string& out_prefix, const PackOptions& o,
                const std::function<void(const PackProgress&)>& progress) {
  const auto start = Clock::now();
  check_pack_options(o);
  EMBER_CHECK(!items.empty(), "no images to pack");
  EMBER_CHECK(!out_prefix.empty(), "empty output prefix");

  RecordFileSettings settings;
  choose_labels(items, class_names, settings);
  settings.resize = o.pass_through ? 0 : uint32_t(o.resize);
  settings.quality = o.pass_through ? 0 : (o.encoding == PackEncoding::jpeg ? uint32_t(o.quality) : 100u);
  settings.channels = o.pass_through ? 0 : uint32_t(o.channels);

  // The order: list order, or a deterministic shuffle of it.
  const int64_t n = int64_t(items.size());
  std::vector<size_t> order(items.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (o.shuffle) {
    PhiloxStream rng(o.seed, kShuffleStream);
    for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[size_t(rng.below(i + 1))]);
  }
  // Position p -> output file: split, then round-robin shard.
  const int64_t n_train = o.train_ratio < 1 ? int64_t(std::floor(double(n) * o.train_ratio + 1e-9)) : n;
  auto target = [&](int64_t p) -> size_t {
    const int64_t split = p < n_train ? 0 : 1;
    const int64_t j = split == 0 ? p : p - n_train;
    return size_t(split * o.shards + j % o.shards);
  };

  const auto names = pack_output_names(out_prefix, o);
  std::vector<std::string> paths;
  for (const auto& split : names) paths.insert(paths.end(), split.begin(), split.end());
  const fs::path parent = fs::path(out_prefix).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    EMBER_CHECK(!ec, parent.string(), ": cannot create output folder (", ec.message(), ")");
  }
  std::vector<std::unique_ptr<RecordWriter>> writers;
  for (const auto& p : paths) writers.push_back(std::make_unique<RecordWriter>(p, settings));

  PackReport report;
  PackProgress prog;
  prog.total = n;
  const int64_t window = int64_t(o.threads) * 4 + 4;
  std::vector<Prepared> slots(static_cast<size_t>(window));

  auto work = [&](int64_t p, size_t slot) {
    const SourceItem& item = items[order[size_t(p)]];
    Prepared& r = slots[slot];
    r.ok = false;
    r.reason.clear();
    r.source_bytes = 0;
    try {
      std::vector<uint8_t> bytes = read_file(item.path);
      r.source_bytes = bytes.size();
      // Decode only as many pixels as the output needs: a pass-through check
      // at 1/8 scale (libjpeg-turbo still entropy-decodes every block, so
      // corrupt data is found), a resize at the largest DCT reduction that
      // keeps at least the output size (data/image.h decode_for_resize).
      const ImageInfo info = probe_image(bytes.data(), bytes.size(), item.path);
      const Box whole{0, 0, info.width, info.height};
      int out_h = 1, out_w = 1;
      if (!o.pass_through)
        std::tie(out_h, out_w) = o.resize > 0 ? short_side_size(info.height, info.width, o.resize)
                                              : std::pair<int, int>(info.height, info.width);
      DecodedRegion decoded;
      decode_for_resize(bytes.data(), bytes.size(), o.pass_through ? 0 : o.channels, whole, out_h, out_w, decoded,
                        item.path);
      Image img = std::move(decoded.image);
      if (o.pass_through) {
        r.encoding = sniff_encoding(bytes.data(), bytes.size());
        r.payload = std::move(bytes);
        img.height = info.height, img.width = info.width;  // the stored image's size, not the check's
      } else {
        Image resized;
        const Image* cur = &img;
        if (img.height != out_h || img.width != out_w) {
          resize_image(img, out_h, out_w, resized);
          cur = &resized;
        }
        switch (o.encoding) {
          case PackEncoding::jpeg:
            encode_jpeg(*cur, o.quality, r.payload);
            r.encoding = Encoding::jpeg;
            break;
          case PackEncoding::png:
            encode_png(*cur, r.payload);
            r.encoding = Encoding::png;
            break;
          case PackEncoding::raw:
            r.payload = cur->pixels;
            r.encoding = Encoding::raw;
            break;
        }
        if (cur == &resized) img = std::move(resized);
      }
      r.height = uint32_t(img.height), r.width = uint32_t(img.width), r.channels = uint32_t(img.channels);
      r.ok = true;
    } catch (const Error& e) {
      r.reason = strip_path(e.what(), item.path);
      r.payload.clear();
    }
  };

  auto consume = [&](int64_t p, size_t slot) {
    const SourceItem& item = items[order[size_t(p)]];
    Prepared& r = slots[slot];
    report.source_bytes += r.source_bytes;
    if (r.ok) {
      RecordInput in;
      in.id = item.id;
      if (settings.label_type == LabelType::class_index)
        in.label = int64_t(item.labels[0]);
      else
        in.label_values = item.labels;  // the writer derives the label field from the first value
      in.height = r.height, in.width = r.width, in.channels = r.channels;
      in.encoding = r.encoding;
      in.payload = r.payload.data();
      in.payload_length = r.payload.size();
      writers[target(p)]->add(in);
      ++report.packed;
      ++prog.packed;
    } else {
      report.skipped.push_back({item.path, r.reason});
      ++prog.skipped;
      if (o.on_skip)
        o.on_skip(item.path, r.reason);
      else
        std::fprintf(stderr, "skipping %s: %s\n", item.path.c_str(), r.reason.c_str());
    }
    prog.done = p + 1;
    if (progress) {
      prog.seconds = seconds_since(start);
      progress(prog);
    }
  };

  run_ordered(n, o.threads, window, work, consume);

  for (size_t k = 0; k < writers.size(); ++k) {
    writers[k]->finish();
    PackOutput out;
    out.path = paths[k];
    out.records = int64_t(writers[k]->records());
    std::error_code ec;
    out.bytes = uint64_t(fs::file_size(paths[k], ec));
    EMBER_CHECK(!ec, paths[k], ": cannot stat the written file (", ec.message(), ")");
    report.output_bytes += out.bytes;
    report.outputs.push_back(out);
  }
  report.seconds = seconds_since(start);
  return report;
}

VerifyReport verify_record_file(const std::string& path, int threads, size_t max_messages) {
  const auto start = Clock::now();
  VerifyReport report;
  report.path = path;
  std::unique_ptr<RecordFile> file;
  try {
    file = std::make_unique<RecordFile>(path);
  } catch (const Error& e) {
    report.problems.push_back(e.what());
    report.seconds = seconds_since(start);
    return report;
  }
  report.records = file->size();
  report.bytes = file->file_size();
  report.num_classes = int(file->header().num_classes);
  const bool class_labels = file->header().label_type == uint32_t(LabelType::class_index);
  report.float_labels = !class_labels;
  report.label_width = int(file->header().label_width);
  const int64_t num_classes = int64_t(file->header().num_classes);

  threads = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, report.records)));
  struct Found {
    int64_t bad = 0;
    std::vector<std::pair<int64_t, std::string>> messages;  // the thread's first ones, by record number
  };
  std::vector<Found> found(static_cast<size_t>(threads));
  auto check_range = [&](int t) {
    Found& f = found[size_t(t)];
    Record rec;
    Image img;
    for (int64_t i = t; i < report.records; i += threads) {
      try {
        file->read(i, rec);
        const std::string what = cat(path, ": record ", i, " (id ", rec.id, ")");
        if (class_labels && num_classes > 0)
          EMBER_CHECK(rec.label >= 0 && rec.label < num_classes, what, ": label ", rec.label, " is outside [0, ",
                      num_classes, ")");
        if (rec.encoding == Encoding::raw) {
          EMBER_CHECK(rec.payload.size() == uint64_t(rec.height) * rec.width * rec.channels, what, ": raw payload of ",
                      rec.payload.size(), " bytes for ", rec.height, "x", rec.width, "x", rec.channels, " pixels");
        } else {
          decode_image(rec.payload.data(), rec.payload.size(), 0, img, what);
          EMBER_CHECK(uint32_t(img.height) == rec.height && uint32_t(img.width) == rec.width &&
                          uint32_t(img.channels) == rec.channels,
                      what, ": image decodes to ", img.height, "x", img.width, "x", img.channels, ", the record says ",
                      rec.height, "x", rec.width, "x", rec.channels);
        }
      } catch (const Error& e) {
        ++f.bad;
        if (f.messages.size() < max_messages) f.messages.emplace_back(i, e.what());
      }
    }
  };
  if (threads == 1) {
    check_range(0);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(check_range, t);
    for (auto& th : pool) th.join();
  }
  std::vector<std::pair<int64_t, std::string>> all;
  for (auto& f : found) {
    report.bad += f.bad;
    all.insert(all.end(), f.messages.begin(), f.messages.end());
  }
  std::sort(all.begin(), all.end());
  for (size_t k = 0; k < all.size() && k < max_messages; ++k) report.problems.push_back(all[k].second);
  report.seconds = seconds_since(start);
  return report;
}

}  // namespace ember::data
