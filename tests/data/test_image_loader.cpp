// tests/data/test_image_loader.cpp — data/augment_rrc.h and data/image_loader.h:
// the size schedule parser, torchvision's RandomResizedCrop parameters and
// validation crop, and the threaded record loader on small record files
// (raw, PNG and JPEG records) — batches against a direct decode + crop +
// resize of each sample, independence of thread count and prefetch depth,
// sharding, epochs, size schedules, abandoning epochs, corrupt records.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/augment_rrc.h"
#include "data/batch_iterator.h"
#include "data/image.h"
#include "data/image_loader.h"
#include "data/jpeg_turbo.h"
#include "data/record_file.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "tests/support/photo_like.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using namespace ember::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;
using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::contains;
using ember::testing::expect_error;

constexpr int64_t kLabelBase = 1000;  // record i has label kLabelBase + i


// A smooth but distinct pattern per image (so JPEG keeps it recognisable).
Image pattern_image(int height, int width, int channels, int id) {
  Image img;
  img.height = height, img.width = width, img.channels = channels;
  img.pixels.resize(size_t(height) * size_t(width) * size_t(channels));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c)
        img.pixels[(size_t(y) * size_t(width) + size_t(x)) * size_t(channels) + size_t(c)] =
            uint8_t((y * 9 + x * 5 + c * 70 + id * 37 + (x * y) % 23) & 255);
  return img;
}

struct Sample {
  Image image;  // what the record decodes to
  Encoding encoding;
  Bytes payload;  // what the record stores
};

// Writes the samples as one record file; record i gets label kLabelBase + i.
void write_records(const std::string& path, const std::vector<Sample>& samples) {
  RecordFileSettings settings;
  settings.num_classes = 0;
  RecordWriter writer(path, settings);
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    RecordInput in;
    in.id = i;
    in.label = kLabelBase + int64_t(i);
    in.height = uint32_t(s.image.height);
    in.width = uint32_t(s.image.width);
    in.channels = uint32_t(s.image.channels);
    in.encoding = s.encoding;
    in.payload = s.payload.data();
    in.payload_length = s.payload.size();
    writer.add(in);
  }
  writer.finish();
}

Sample raw_sample(int height, int width, int channels, int id) {
  Sample s{pattern_image(height, width, channels, id), Encoding::raw, {}};
  s.payload = s.image.pixels;
  return s;
}

// Mixed set: raw images of varying sizes, every 5th a PNG, every 7th a JPEG
// (whose expected pixels are its decoded bytes).
std::vector<Sample> mixed_samples(int n) {
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    const int h = 20 + (i * 7) % 17, w = 18 + (i * 11) % 23;
    Sample s = raw_sample(h, w, 3, i);
    if (i % 5 == 1) {
      s.encoding = Encoding::png;
      encode_png(s.image, s.payload);
    } else if (i % 7 == 3) {
      s.encoding = Encoding::jpeg;
      encode_jpeg(s.image, 90, s.payload);
      decode_image(s.payload.data(), s.payload.size(), 3, s.image, "test jpeg");
    }
    out.push_back(std::move(s));
  }
  return out;
}

// Everything one epoch of a loader produces, batch by batch.
struct EpochOutput {
  std::vector<Bytes> images;
  std::vector<std::vector<int64_t>> labels;
  std::vector<Shape> shapes;
};

EpochOutput run_epoch(ImageLoader& loader, int epoch) {
  loader.start_epoch(epoch);
  EpochOutput out;
  Batch b;
  while (loader.next(b)) {
    REQUIRE(b.images.ndim() == 4);
    REQUIRE(b.images.size(0) == b.size);
    REQUIRE(b.labels.size(0) == b.size);
    const uint8_t* p = b.images.data<uint8_t>();
    out.images.emplace_back(p, p + b.images.numel());
    const int64_t* l = b.labels.data<int64_t>();
    out.labels.emplace_back(l, l + b.size);
    out.shapes.push_back(b.images.shape());
  }
  return out;
}

// The C x S x S planes of `box` of a sample, resized as the loader does: a
// JPEG through decode_for_resize (a reduced, partial decode with
// libjpeg-turbo; tests/data/test_jpeg_decode.cpp checks that path against the
// full-size one), anything else from its decoded image.
Bytes expected_box(const Sample& s, const Box& box, int S, bool flip) {
  Bytes out(size_t(s.image.channels) * size_t(S) * size_t(S));
  if (s.encoding == Encoding::jpeg) {
    DecodedRegion region;
    decode_for_resize(s.payload.data(), s.payload.size(), s.image.channels, box, S, S, region, "test jpeg");
    resize_region_to_planar(region, box, S, S, flip, out.data());
  } else {
    resize_to_planar(s.image, box, S, S, flip, out.data());
  }
  return out;
}

// The C x S x S planes the loader should produce for a training sample.
Bytes expected_train(const Sample& s, const LoaderOptions& o, int epoch, int64_t index, int S) {
  const Image& img = s.image;
  PhiloxStream rng(o.seed, sample_stream_id(epoch, index));
  Box box{0, 0, img.width, img.height};
  if (o.augment == Augment::random_resized_crop)
    box = random_resized_crop_box(img.height, img.width, o.min_area, o.max_area, o.min_ratio, o.max_ratio, rng);
  const bool flip = o.flip && (rng.next_u32() >> 31) != 0;
  return expected_box(s, box, S, flip);
}

// HWC -> CHW.
Bytes planar(const Image& img) {
  Bytes out(img.pixels.size());
  const size_t hw = size_t(img.height) * size_t(img.width);
  for (size_t i = 0; i < hw; ++i)
    for (int c = 0; c < img.channels; ++c) out[size_t(c) * hw + i] = img.pixels[i * size_t(img.channels) + size_t(c)];
  return out;
}

Bytes sample_bytes(const EpochOutput& e, size_t batch, int64_t j) {
  const Bytes& all = e.images[batch];
  const size_t per = all.size() / e.labels[batch].size();
  return Bytes(all.begin() + std::ptrdiff_t(size_t(j) * per), all.begin() + std::ptrdiff_t(size_t(j + 1) * per));
}

// Redirects stderr (fd 2) to a file until text() is called.
struct StderrCapture {
  std::string path;
  int saved = -1;
  explicit StderrCapture(std::string file) : path(std::move(file)) {
    std::fflush(stderr);
    saved = dup(2);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() { restore(); }
  void restore() {
    if (saved < 0) return;
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    saved = -1;
  }
  std::string text() {
    restore();
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};

// Python's round for the reference: ties to even via the default FP mode.
int py_round(double x) { return int(std::nearbyint(x)); }

}  // namespace

TEST_CASE("parse_size_schedule reads EPOCH:SIZE lists and rejects bad text") {
  using V = std::vector<std::pair<int, int>>;
  CHECK(parse_size_schedule("0:128,6:224,16:288") == V{{0, 128}, {6, 224}, {16, 288}});
  CHECK(parse_size_schedule("3:64") == V{{3, 64}});
  CHECK(parse_size_schedule("0:128, 6:224") == V{{0, 128}, {6, 224}});
  for (const char* bad : {"", ",", "0:128,", ",0:128", "0:128,,6:224", "0", "0:", ":128", "a:128", "0:12x", "0:128:3",
                          "0:0", "0:-5", "-1:64", "6:224,6:288", "6:224,3:288", "1.5:64"}) {
    INFO("text: '", bad, "'");
    const std::string msg = error_of([&] { parse_size_schedule(bad); });
    CHECK(msg.find("size schedule") != std::string::npos);
  }
}

TEST_CASE("random_resized_crop_box matches torchvision's get_params") {
  const int H = 375, W = 500;
  const double min_area = 0.08, max_area = 1.0, min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  std::set<int> xs, widths;
  int fallbacks = 0;
  for (uint64_t s = 0; s < 400; ++s) {
    PhiloxStream rng(7, s);
    const Box b = random_resized_crop_box(H, W, min_area, max_area, min_ratio, max_ratio, rng);
    // Inside the image.
    REQUIRE(b.width > 0);
    REQUIRE(b.height > 0);
    REQUIRE(b.x >= 0);
    REQUIRE(b.y >= 0);
    REQUIRE(b.x + b.width <= W);
    REQUIRE(b.y + b.height <= H);
    // An independent replay of the first accepted try (or the fallback).
    PhiloxStream ref(7, s);
    Box want{0, 0, W, H};
    bool found = false;
    for (int t = 0; t < 10 && !found; ++t) {
      const double area = double(H) * W * uniform_double(ref, min_area, max_area);
      const double ratio = std::exp(uniform_double(ref, std::log(min_ratio), std::log(max_ratio)));
      const int w = py_round(std::sqrt(area * ratio)), h = py_round(std::sqrt(area / ratio));
      if (w > 0 && w <= W && h > 0 && h <= H) {
        want.height = h, want.width = w;
        want.y = int(ref.below(uint64_t(H - h + 1)));
        want.x = int(ref.below(uint64_t(W - w + 1)));
        found = true;
      }
    }
    if (!found) ++fallbacks;
    CHECK(b.x == want.x);
    CHECK(b.y == want.y);
    CHECK(b.width == want.width);
    CHECK(b.height == want.height);
    // Area fraction and aspect ratio within bounds (up to the rounding of w and h).
    if (found) {
      const double a_hi = (b.width + 0.5) * (b.height + 0.5) / (double(H) * W);
      const double a_lo = (b.width - 0.5) * (b.height - 0.5) / (double(H) * W);
      CHECK(a_hi >= min_area);
      CHECK(a_lo <= max_area);
      CHECK((b.width + 0.5) / (b.height - 0.5) >= min_ratio);
      CHECK((b.width - 0.5) / (b.height + 0.5) <= max_ratio);
    }
    xs.insert(b.x);
    widths.insert(b.width);
    // Deterministic per stream.
    PhiloxStream again(7, s);
    const Box b2 = random_resized_crop_box(H, W, min_area, max_area, min_ratio, max_ratio, again);
    CHECK((b2.x == b.x && b2.y == b.y && b2.width == b.width && b2.height == b.height));
  }
  CHECK(fallbacks < 5);
  CHECK(xs.size() > 100);  // the boxes really vary
  CHECK(widths.size() > 100);
}

TEST_CASE("random_resized_crop_box falls back to torchvision's centre crop") {
  PhiloxStream rng(1, 2);
  // Area range larger than the image: no try can succeed.
  Box b = random_resized_crop_box(100, 500, 2.0, 3.0, 0.75, 4.0 / 3.0, rng);  // wide: h = 100, w = round(133.3)
  CHECK(b.height == 100);
  CHECK(b.width == 133);
  CHECK(b.x == (500 - 133) / 2);
  CHECK(b.y == 0);
  b = random_resized_crop_box(500, 100, 2.0, 3.0, 0.75, 4.0 / 3.0, rng);  // tall: w = 100, h = round(133.3)
  CHECK(b.width == 100);
  CHECK(b.height == 133);
  CHECK(b.x == 0);
  CHECK(b.y == (500 - 133) / 2);
  b = random_resized_crop_box(90, 100, 2.0, 3.0, 0.75, 4.0 / 3.0, rng);  // ratio inside: the whole image
  CHECK((b.x == 0 && b.y == 0 && b.width == 100 && b.height == 90));
  // Python's round: halves go to the even neighbour (4.5 -> 4, 7.5 -> 8).
  b = random_resized_crop_box(3, 100, 2.0, 3.0, 0.5, 1.5, rng);
  CHECK(b.width == 4);
  CHECK(b.x == (100 - 4) / 2);
  b = random_resized_crop_box(5, 100, 2.0, 3.0, 0.5, 1.5, rng);
  CHECK(b.width == 8);
  b = random_resized_crop_box(100, 5, 2.0, 3.0, 0.4, 1.0, rng);  // h = round(5 / 0.4 = 12.5) = 12
  CHECK(b.height == 12);
  // Bad ranges are errors.
  expect_error([&] { random_resized_crop_box(10, 10, 0.5, 0.4, 0.75, 1.3, rng); }, "area range");
  expect_error([&] { random_resized_crop_box(10, 10, 0.1, 1.0, 0.0, 1.3, rng); }, "ratio range");
  expect_error([&] { random_resized_crop_box(0, 10, 0.1, 1.0, 0.75, 1.3, rng); }, "image size");
}

TEST_CASE("uniform_double stays in range and uses the stream") {
  PhiloxStream a(3, 4), b(3, 4), c(3, 5);
  double lo = 1, hi = 0;
  for (int i = 0; i < 1000; ++i) {
    const double x = uniform_double(a, 2.0, 5.0);
    CHECK(x == uniform_double(b, 2.0, 5.0));
    lo = std::min(lo, x), hi = std::max(hi, x);
    REQUIRE(x >= 2.0);
    REQUIRE(x < 5.0);
  }
  CHECK(lo < 2.05);
  CHECK(hi > 4.95);
  CHECK(uniform_double(a, 0, 1) != uniform_double(c, 0, 1));
}

TEST_CASE("validation box equals torchvision's Resize(256) + CenterCrop(224)") {
  CHECK(validation_resize(224, 0) == 256);
  CHECK(validation_resize(128, 0) == 146);  // round(146.29)
  CHECK(validation_resize(7, 0) == 8);
  CHECK(validation_resize(224, 300) == 300);
  // 500 wide x 375 high: Resize(256) -> 341 x 256, CenterCrop(224) at (left 58, top 16);
  // back in source pixels: x 58 * 500 / 341 = 85.0, y 16 * 375 / 256 = 23.4, side 328.1.
  Box b = validation_crop_box(375, 500, 224, 256);
  CHECK(b.width == 328);
  CHECK(b.height == 328);
  CHECK(b.x == 86);
  CHECK(b.y == 24);  // round((375 - 328) / 2 = 23.5) = 24, as CenterCrop rounds
  const double tv_x = 58.0 * 500 / 341, tv_y = 16.0 * 375 / 256, tv_side = 224.0 * 375 / 256;
  CHECK(std::abs(b.x - tv_x) <= 1.0);
  CHECK(std::abs(b.y - tv_y) <= 1.0);
  CHECK(std::abs(b.width - tv_side) <= 1.0);
  // Portrait: the same box transposed.
  b = validation_crop_box(500, 375, 224, 256);
  CHECK((b.x == 24 && b.y == 86 && b.width == 328 && b.height == 328));
  // Tiny images keep at least one pixel; output larger than resize stays within the image.
  b = validation_crop_box(3, 3, 1, 256);
  CHECK((b.width == 1 && b.x == 1 && b.y == 1));
  b = validation_crop_box(40, 60, 300, 256);
  CHECK((b.width == 40 && b.height == 40 && b.x == 10 && b.y == 0));
}

TEST_CASE("validation batches equal a direct resize of the centre box") {
  TempDir dir;
  const std::vector<Sample> samples = mixed_samples(11);
  write_records(dir.file("val.erec"), samples);
  RecordDataset data(dir.file("val.erec"));
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.prefetch_batches = 2;
  o.validation = true;
  o.output_size = 16;
  o.shuffle = true;  // ignored for validation
  ImageLoader loader(data, o);
  CHECK(loader.batches_per_epoch() == 3);
  CHECK(loader.samples_per_epoch() == 11);
  const EpochOutput e = run_epoch(loader, 0);
  REQUIRE(e.labels.size() == 3);
  CHECK(e.labels[2].size() == 3);
  for (size_t k = 0; k < e.labels.size(); ++k) {
    CHECK(e.shapes[k] == Shape({int64_t(e.labels[k].size()), 3, 16, 16}));
    for (size_t j = 0; j < e.labels[k].size(); ++j) {
      const int64_t index = int64_t(k * 4 + j);
      CHECK(e.labels[k][j] == kLabelBase + index);
      const Image& img = samples[size_t(index)].image;
      const Box box = validation_crop_box(img.height, img.width, 16, validation_resize(16, 0));
      const Bytes want = expected_box(samples[size_t(index)], box, 16, false);
      CHECK_MESSAGE(sample_bytes(e, k, int64_t(j)) == want, "sample ", index);
    }
  }
  // Same again for another epoch (no shuffle, no randomness).
  const EpochOutput e2 = run_epoch(loader, 3);
  CHECK(e2.images == e.images);
  Batch b;
  CHECK_FALSE(loader.next(b));  // stays at the end
}

TEST_CASE("training batches match a direct crop and are the same for any threads and prefetch") {
  TempDir dir;
  const std::vector<Sample> samples = mixed_samples(23);
  write_records(dir.file("train.erec"), samples);
  RecordDataset data(dir.file("train.erec"));
  LoaderOptions o;
  o.batch_size = 5;
  o.seed = 42;
  o.output_size = 12;
  o.min_area = 0.2;
  std::vector<EpochOutput> outs;
  for (auto [threads, prefetch] : std::vector<std::pair<int, int>>{{1, 1}, {2, 1}, {4, 4}, {2, 4}, {1, 3}}) {
    o.threads = threads;
    o.prefetch_batches = prefetch;
    ImageLoader loader(data, o);
    outs.push_back(run_epoch(loader, 2));
  }
  for (size_t i = 1; i < outs.size(); ++i) {
    CHECK(outs[i].images == outs[0].images);
    CHECK(outs[i].labels == outs[0].labels);
  }
  // Against a direct decode + random-resized-crop + flip of each sample, in the epoch's order.
  const EpochOutput& e = outs[0];
  const std::vector<int64_t> order = epoch_order(23, true, 42, 2);
  REQUIRE(e.labels.size() == 5);
  int flips = 0;
  for (size_t k = 0; k < e.labels.size(); ++k)
    for (size_t j = 0; j < e.labels[k].size(); ++j) {
      const int64_t index = order[k * 5 + j];
      CHECK(e.labels[k][j] == kLabelBase + index);
      const Bytes want = expected_train(samples[size_t(index)], o, 2, index, 12);
      CHECK_MESSAGE(sample_bytes(e, k, int64_t(j)) == want, "sample ", index);
      PhiloxStream rng(42, sample_stream_id(2, index));
      const Image& img = samples[size_t(index)].image;
      random_resized_crop_box(img.height, img.width, o.min_area, o.max_area, o.min_ratio, o.max_ratio, rng);
      flips += int(rng.next_u32() >> 31);
    }
  CHECK(flips > 0);  // both flip outcomes occurred
  CHECK(flips < 23);
}

TEST_CASE("JPEG photos: batches are the same for any threads, each sample its box's reduced decode") {
  // Photo-like JPEGs big enough that crops decode at 1/1, 1/2 and 1/4 and
  // skip rows and columns (with libjpeg-turbo).
  TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 14; ++i) {
    const int h = 90 + (i % 3) * 37, w = 120 - (i % 4) * 13;
    Sample s{ember::testing::photo_like_image(h, w, 3, uint64_t(i)), Encoding::jpeg, {}};
    encode_jpeg(s.image, 90, s.payload);
    decode_image(s.payload.data(), s.payload.size(), 3, s.image, "test jpeg");
    samples.push_back(std::move(s));
  }
  write_records(dir.file("photos.erec"), samples);
  RecordDataset data(dir.file("photos.erec"));
  LoaderOptions o;
  o.batch_size = 4;
  o.seed = 9;
  o.output_size = 20;
  std::vector<EpochOutput> outs;
  for (int threads : {1, 3}) {
    o.threads = threads;
    ImageLoader loader(data, o);
    outs.push_back(run_epoch(loader, 1));
  }
  CHECK(outs[1].images == outs[0].images);
  const std::vector<int64_t> order = epoch_order(14, true, 9, 1);
  std::set<int> reductions;
  for (size_t k = 0; k < outs[0].labels.size(); ++k)
    for (size_t j = 0; j < outs[0].labels[k].size(); ++j) {
      const int64_t index = order[k * 4 + j];
      CHECK_MESSAGE(sample_bytes(outs[0], k, int64_t(j)) == expected_train(samples[size_t(index)], o, 1, index, 20),
                    "sample ", index);
      PhiloxStream rng(9, sample_stream_id(1, index));
      const Image& img = samples[size_t(index)].image;
      const Box box = random_resized_crop_box(img.height, img.width, o.min_area, o.max_area, o.min_ratio,
                                              o.max_ratio, rng);
      reductions.insert(jpeg_turbo_built() ? jpeg_reduction_for(box.height, box.width, 20, 20) : 1);
    }
  if (jpeg_turbo_built()) CHECK(reductions.size() >= 2);  // several scales were exercised
  // Validation: the centre box, decoded reduced where the resize allows.
  o.validation = true;
  o.val_resize = 24;
  ImageLoader val(data, o);
  const EpochOutput v = run_epoch(val, 0);
  for (size_t k = 0; k < v.labels.size(); ++k)
    for (size_t j = 0; j < v.labels[k].size(); ++j) {
      const Sample& s = samples[k * 4 + j];
      const Box box = validation_crop_box(s.image.height, s.image.width, 20, 24);
      CHECK(sample_bytes(v, k, int64_t(j)) == expected_box(s, box, 20, false));
    }
}

TEST_CASE("sharding: ranks split each epoch, padded to equal batch counts") {
  TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 20; ++i) samples.push_back(raw_sample(8, 8, 3, i));
  write_records(dir.file("s.erec"), samples);
  RecordDataset data(dir.file("s.erec"));
  LoaderOptions o;
  o.batch_size = 3;
  o.world = 3;
  o.seed = 5;
  o.output_size = 8;
  o.augment = Augment::none;
  o.flip = false;
  std::map<int64_t, int> seen;
  std::vector<int64_t> counts;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    o.threads = 1 + r;
    ImageLoader loader(data, o);
    CHECK(loader.samples_per_epoch() == 7);
    CHECK(loader.batches_per_epoch() == 3);
    const EpochOutput e = run_epoch(loader, 1);
    counts.push_back(int64_t(e.labels.size()));
    const std::vector<int64_t> mine = shard_order(epoch_order(20, true, 5, 1), r, 3);
    std::vector<int64_t> got;
    for (size_t k = 0; k < e.labels.size(); ++k)
      for (size_t j = 0; j < e.labels[k].size(); ++j) {
        got.push_back(e.labels[k][j] - kLabelBase);
        ++seen[e.labels[k][j] - kLabelBase];
        // Augment::none at the image's size: the image itself.
        CHECK(sample_bytes(e, k, int64_t(j)) == planar(samples[size_t(got.back())].image));
      }
    CHECK(got == mine);
  }
  CHECK(counts == std::vector<int64_t>{3, 3, 3});
  CHECK(seen.size() == 20);  // every sample present
  int repeats = 0;
  for (const auto& [id, n] : seen) repeats += n - 1;
  CHECK(repeats == 1);  // 21 slots for 20 samples: one padding repeat

  // drop_last drops each rank's partial last batch.
  o.rank = 0;
  o.drop_last = true;
  ImageLoader dl(data, o);
  CHECK(dl.samples_per_epoch() == 6);
  CHECK(dl.batches_per_epoch() == 2);
  const EpochOutput e = run_epoch(dl, 0);
  CHECK(e.labels.size() == 2);
  CHECK(e.labels[1].size() == 3);
}

TEST_CASE("epochs differ in order, schedules change the size, restarts and teardown work") {
  TempDir dir;
  const std::vector<Sample> samples = mixed_samples(30);
  write_records(dir.file("e.erec"), samples);
  RecordDataset data(dir.file("e.erec"));
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.prefetch_batches = 2;
  o.seed = 9;
  o.output_size = 10;
  o.size_schedule = {{1, 14}, {3, 6}};
  ImageLoader loader(data, o);
  CHECK(loader.output_size(0) == 10);
  CHECK(loader.output_size(1) == 14);
  CHECK(loader.output_size(2) == 14);
  CHECK(loader.output_size(3) == 6);
  CHECK(loader.output_size(100) == 6);

  // next() without start_epoch begins epoch 0.
  Batch b;
  REQUIRE(loader.next(b));
  CHECK(b.images.shape() == Shape({4, 3, 10, 10}));

  // Abandon epoch 0 mid-way; epoch 1 then runs in full, equal to a fresh loader's.
  const EpochOutput e1 = run_epoch(loader, 1);
  CHECK(e1.labels.size() == 8);
  for (const Shape& s : e1.shapes) CHECK(s.size(2) == 14);
  ImageLoader fresh(data, o);
  const EpochOutput f1 = run_epoch(fresh, 1);
  CHECK(f1.images == e1.images);
  CHECK(f1.labels == e1.labels);

  const EpochOutput e0 = run_epoch(fresh, 0);
  const EpochOutput e3 = run_epoch(fresh, 3);
  for (const Shape& s : e0.shapes) CHECK(s.size(3) == 10);
  for (const Shape& s : e3.shapes) CHECK(s.size(3) == 6);
  auto flat = [](const EpochOutput& e) {
    std::vector<int64_t> v;
    for (const auto& l : e.labels) v.insert(v.end(), l.begin(), l.end());
    return v;
  };
  CHECK(flat(e0) != flat(e1));
  CHECK(flat(e1) != flat(e3));
  std::vector<int64_t> sorted = flat(e0);
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) CHECK(sorted[i] == kLabelBase + int64_t(i));

  // Restarting the same epoch reproduces it.
  CHECK(run_epoch(fresh, 1).images == e1.images);

  // Several start_epoch calls in a row, and one mid-epoch restart of the same epoch.
  fresh.start_epoch(2);
  fresh.start_epoch(0);
  REQUIRE(fresh.next(b));
  REQUIRE(fresh.next(b));
  CHECK(run_epoch(fresh, 0).images == e0.images);

  // Teardown while workers wait for ring slots, mid-epoch, or before any epoch.
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    ImageLoader l(data, o);
    if (i >= 1) l.start_epoch(i);
    if (i >= 2) REQUIRE(l.next(b));
    if (i >= 3) {
      for (int k = 0; k < 7; ++k) REQUIRE(l.next(b));
      CHECK_FALSE(l.next(b));
    }
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("start_epoch at a batch continues the epoch exactly (resume), for any threads and prefetch") {
  TempDir dir;
  const std::vector<Sample> samples = mixed_samples(30);
  write_records(dir.file("r.erec"), samples);
  RecordDataset data(dir.file("r.erec"));
  LoaderOptions o;
  o.batch_size = 4;  // 8 batches, the last one of 2
  o.threads = 2;
  o.prefetch_batches = 3;
  o.seed = 5;
  o.output_size = 12;
  ImageLoader whole(data, o);
  const EpochOutput full = run_epoch(whole, 2);
  REQUIRE(full.images.size() == 8);
  for (int64_t first : {int64_t(1), int64_t(3), int64_t(5), int64_t(7), int64_t(8)}) {
    for (int threads : {1, 3}) {
      LoaderOptions r = o;
      r.threads = threads;
      r.prefetch_batches = threads == 1 ? 1 : 2;
      ImageLoader resumed(data, r);
      resumed.start_epoch(2, first);
      CHECK(resumed.position() == first);
      Batch b;
      int64_t k = first;
      while (resumed.next(b)) {
        REQUIRE(k < 8);
        const uint8_t* p = b.images.data<uint8_t>();
        CHECK(Bytes(p, p + b.images.numel()) == full.images[size_t(k)]);
        CHECK(std::vector<int64_t>(b.labels.data<int64_t>(), b.labels.data<int64_t>() + b.size) ==
              full.labels[size_t(k)]);
        ++k;
        CHECK(resumed.position() == k);
      }
      CHECK(k == 8);
    }
  }
  ImageLoader bad(data, o);
  expect_error([&] { bad.start_epoch(0, 9); }, "batch 9 is outside epoch 0's 8 batches");
}

TEST_CASE("pad_crop equals data/augment.h's padded crop and flip") {
  TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 9; ++i) samples.push_back(raw_sample(12, 12, 3, i));
  write_records(dir.file("p.erec"), samples);
  RecordDataset data(dir.file("p.erec"));
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.seed = 77;
  o.output_size = 12;
  o.augment = Augment::pad_crop;
  o.pad = 3;
  o.flip = true;
  {
    ImageLoader loader(data, o);
    const EpochOutput e = run_epoch(loader, 4);
    const std::vector<int64_t> order = epoch_order(9, true, 77, 4);
    int moved = 0;
    for (size_t k = 0; k < e.labels.size(); ++k)
      for (size_t j = 0; j < e.labels[k].size(); ++j) {
        const int64_t index = order[k * 4 + j];
        REQUIRE(e.labels[k][j] == kLabelBase + index);
        PhiloxStream rng(77, sample_stream_id(4, index));
        const AugmentParams p = draw_augment(rng, 3, true);
        moved += (p.dx != 0 || p.dy != 0);
        const Bytes src = planar(samples[size_t(index)].image);
        Bytes want(src.size());
        apply_augment(src.data(), want.data(), 3, 12, 12, p);
        CHECK_MESSAGE(sample_bytes(e, k, int64_t(j)) == want, "sample ", index);
      }
    CHECK(moved > 0);
  }
  // pad 0, no flip: the image itself.
  o.pad = 0;
  o.flip = false;
  ImageLoader plain(data, o);
  const EpochOutput e = run_epoch(plain, 0);
  const std::vector<int64_t> order = epoch_order(9, true, 77, 0);
  for (size_t k = 0; k < e.labels.size(); ++k)
    for (size_t j = 0; j < e.labels[k].size(); ++j)
      CHECK(sample_bytes(e, k, int64_t(j)) == planar(samples[size_t(order[k * 4 + j])].image));
}

TEST_CASE("raw records are converted to the requested channel count") {
  TempDir dir;
  // Random pixels, so every channel mix shows in the output.
  std::vector<Sample> samples = {raw_sample(6, 7, 3, 1), raw_sample(6, 7, 1, 2)};
  PhiloxStream noise(11, 12);
  for (Sample& s : samples) {
    for (uint8_t& v : s.image.pixels) v = uint8_t(noise.next_u32());
    s.payload = s.image.pixels;
  }
  write_records(dir.file("c.erec"), samples);
  RecordDataset data(dir.file("c.erec"));
  LoaderOptions o;
  o.batch_size = 2;
  o.shuffle = false;
  o.augment = Augment::none;
  o.flip = false;
  o.output_size = 7;  // the 6 x 7 images stretched to 7 x 7
  for (int channels : {1, 3}) {
    o.channels = channels;
    ImageLoader loader(data, o);
    const EpochOutput e = run_epoch(loader, 0);
    REQUIRE(e.labels.size() == 1);
    CHECK(e.shapes[0] == Shape({2, channels, 7, 7}));
    for (int j = 0; j < 2; ++j) {
      const Image& src = samples[size_t(j)].image;
      Image conv;
      conv.height = src.height, conv.width = src.width, conv.channels = channels;
      for (size_t i = 0; i < size_t(src.height * src.width); ++i) {
        const uint8_t* p = src.pixels.data() + i * size_t(src.channels);
        const uint8_t grey = src.channels == 3 ? uint8_t((p[0] * 77 + p[1] * 150 + p[2] * 29) >> 8) : p[0];
        for (int c = 0; c < channels; ++c)
          conv.pixels.push_back(channels == 1 ? grey : src.channels == 3 ? p[c] : grey);
      }
      Bytes want(size_t(channels) * 49);
      resize_to_planar(conv, Box{0, 0, 7, 6}, 7, 7, false, want.data());
      CHECK_MESSAGE(sample_bytes(e, 0, j) == want, "record ", j, " to ", channels, " channels");
    }
  }
}

TEST_CASE("corrupt records: next() throws naming the record, or skip_bad drops it") {
  TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 10; ++i) samples.push_back(raw_sample(8, 9, 3, i));
  // Records 6 and 9: "JPEGs" whose bytes are not an image (their CRCs are fine).
  for (int i : {6, 9}) {
    samples[size_t(i)].encoding = Encoding::jpeg;
    samples[size_t(i)].payload = Bytes(50, 0x5A);
  }
  const std::string path = dir.file("bad.erec");
  write_records(path, samples);
  {
    // Flip one payload byte of record 5.
    const uint64_t offset = RecordFile(path).entry(5).offset;
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(std::streamoff(offset + 64 + 10));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(std::streamoff(offset + 64 + 10));
    f.write(&c, 1);
  }
  RecordDataset data(path);
  LoaderOptions o;
  o.batch_size = 4;
  o.threads = 2;
  o.validation = true;
  o.output_size = 8;
  o.val_resize = 8;
  {
    ImageLoader loader(data, o);
    loader.start_epoch(0);
    Batch b;
    REQUIRE(loader.next(b));
    CHECK(b.size == 4);
    // Batch 1 holds records 5 (bad CRC) and 6 (undecodable): the first one is reported.
    const std::string msg = error_of([&] { loader.next(b); });
    CHECK(msg.find("bad.erec: record 5 (id 5) at offset") != std::string::npos);
    CHECK(msg.find("crc32c mismatch") != std::string::npos);
    // The loader goes on with the batch after the failed one, which holds the undecodable record 9.
    const std::string msg2 = error_of([&] { loader.next(b); });
    CHECK(msg2.find("bad.erec: record 9 (id 9) at offset") != std::string::npos);
    CHECK(msg2.find("not a decodable image") != std::string::npos);
    CHECK_FALSE(loader.next(b));
    CHECK(loader.bad_records() == 0);
  }
  o.skip_bad = true;
  ImageLoader loader(data, o);
  StderrCapture capture(dir.file("stderr.txt"));
  const EpochOutput e = run_epoch(loader, 0);
  const std::string warnings = capture.text();
  CHECK(warnings.find("warning: skipping " + path + ": record 5 (id 5) at offset") != std::string::npos);
  CHECK(warnings.find("warning: skipping " + path + ": record 6 (id 6) at offset") != std::string::npos);
  CHECK(warnings.find("warning: skipping " + path + ": record 9 (id 9) at offset") != std::string::npos);
  CHECK(std::count(warnings.begin(), warnings.end(), '\n') == 3);
  REQUIRE(e.labels.size() == 3);
  CHECK(loader.bad_records() == 3);
  CHECK(e.labels[0].size() == 4);
  CHECK(e.labels[1] == std::vector<int64_t>{kLabelBase + 4, kLabelBase + 7});
  CHECK(e.labels[2] == std::vector<int64_t>{kLabelBase + 8});
  CHECK(e.shapes[1] == Shape({2, 3, 8, 8}));
  CHECK(e.shapes[2] == Shape({1, 3, 8, 8}));
  // The kept samples are intact.
  for (size_t j = 0; j < 2; ++j) {
    const Image& img = samples[size_t(e.labels[1][j] - kLabelBase)].image;
    Bytes want(3 * 64);
    resize_to_planar(img, validation_crop_box(8, 9, 8, 8), 8, 8, false, want.data());
    CHECK(sample_bytes(e, 1, int64_t(j)) == want);
  }
  StderrCapture quiet(dir.file("stderr2.txt"));
  run_epoch(loader, 1);
  CHECK(loader.bad_records() == 6);
  // Batches of one: a batch whose only sample is bad is left out altogether.
  o.batch_size = 1;
  ImageLoader single(data, o);
  const EpochOutput e1 = run_epoch(single, 0);
  std::vector<int64_t> ids;
  for (const auto& l : e1.labels) ids.insert(ids.end(), l.begin(), l.end());
  CHECK(ids == std::vector<int64_t>{1000, 1001, 1002, 1003, 1004, 1007, 1008});
  CHECK(e1.labels.size() == 7);  // no empty batches
  CHECK(single.bad_records() == 3);
}

TEST_CASE("window_read_order sorts each prefetch window by shard and offset") {
  TempDir dir;
  std::vector<Sample> a, b;
  for (int i = 0; i < 9; ++i) a.push_back(raw_sample(4 + i % 3, 5, 3, i));
  for (int i = 0; i < 8; ++i) b.push_back(raw_sample(6, 3 + i % 4, 1, i));
  write_records(dir.file("a.erec"), a);
  write_records(dir.file("b.erec"), b);
  RecordDataset data(dir.path.string());
  REQUIRE(data.size() == 17);
  // A shuffled order with repeats (padding of rank 1 of 2 wraps around).
  std::vector<int64_t> order = epoch_order(17, true, 3, 0);
  order.push_back(order[0]);
  const int64_t window = 5;
  const std::vector<int64_t> got = window_read_order(data, order, window);
  REQUIRE(got.size() == order.size());
  for (size_t lo = 0; lo < got.size(); lo += size_t(window)) {
    const size_t hi = std::min(got.size(), lo + size_t(window));
    std::vector<int64_t> positions(got.begin() + std::ptrdiff_t(lo), got.begin() + std::ptrdiff_t(hi));
    std::vector<int64_t> sorted = positions;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) CHECK(sorted[i] == int64_t(lo + i));  // the window's positions
    for (size_t i = lo + 1; i < hi; ++i) {
      const int64_t p = got[i - 1], q = got[i];
      const auto sp = data.locate(order[size_t(p)]), sq = data.locate(order[size_t(q)]);
      const uint64_t op = data.entry(order[size_t(p)]).offset, oq = data.entry(order[size_t(q)]).offset;
      CHECK((sp.first < sq.first || (sp.first == sq.first && (op < oq || (op == oq && p < q)))));
    }
  }
  // Window 1 keeps the epoch order.
  const std::vector<int64_t> same = window_read_order(data, order, 1);
  for (size_t i = 0; i < same.size(); ++i) CHECK(same[i] == int64_t(i));
  expect_error([&] { window_read_order(data, order, 0); }, "window");
}

TEST_CASE("image loader option checks") {
  TempDir dir;
  std::vector<Sample> samples = {raw_sample(4, 4, 3, 0)};
  write_records(dir.file("o.erec"), samples);
  RecordDataset data(dir.file("o.erec"));
  auto with = [&](auto change) {
    LoaderOptions o;
    change(o);
    return error_of([&] { ImageLoader l(data, o); });
  };
  CHECK(with([](LoaderOptions& o) { o.batch_size = 0; }).find("batch size") != std::string::npos);
  CHECK(with([](LoaderOptions& o) { o.threads = 0; }).find("threads") != std::string::npos);
  CHECK(with([](LoaderOptions& o) { o.prefetch_batches = 0; }).find("prefetch") != std::string::npos);
  CHECK(with([](LoaderOptions& o) { o.channels = 2; }).find("channels") != std::string::npos);
  CHECK(with([](LoaderOptions& o) { o.rank = 2, o.world = 2; }).find("rank") != std::string::npos);
  CHECK(with([](LoaderOptions& o) { o.min_area = 0; }).find("area") != std::string::npos);
  CHECK(with([](LoaderOptions& o) { o.size_schedule = {{2, 10}, {1, 12}}; }).find("schedule") != std::string::npos);
  LoaderOptions o;
  ImageLoader ok(data, o);
  expect_error([&] { ok.start_epoch(-1); }, "epoch");
}
