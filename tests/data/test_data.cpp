// tests/data/test_data.cpp — data/: the IDX reader on the real Fashion-MNIST files
// and on crafted bad files, the Fashion-MNIST loader's checks, augmentation
// (crop + flip) against a padded-image reference, and the BatchIterator's
// epoch order, sharding, determinism and batch shapes.
#include <doctest/doctest.h>

#include "tests/support/test_helpers.h"
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "data/augment.h"
#include "data/batch_iterator.h"
#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/image_set.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "engine/parallel.h"
#include "engine/rng.h"

using namespace ember;
using namespace ember::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::contains;
using ember::testing::write_bytes;

// An IDX u8 file's bytes: magic, big-endian dims, data.
Bytes idx_bytes(const std::vector<uint32_t>& dims, const Bytes& data, uint8_t dtype = 0x08) {
  Bytes b = {0, 0, dtype, uint8_t(dims.size())};
  for (uint32_t d : dims) {
    b.push_back(uint8_t(d >> 24));
    b.push_back(uint8_t(d >> 16));
    b.push_back(uint8_t(d >> 8));
    b.push_back(uint8_t(d));
  }
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_gz(const std::string& path, const Bytes& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!b.empty()) REQUIRE(gzwrite(f, b.data(), unsigned(b.size())) == int(b.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

Bytes iota_bytes(size_t n, uint8_t start = 1) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = uint8_t(start + i);
  return b;
}

// The real data sets, loaded once for all test cases.
const ImageSet& fashion(bool train) {
  static const ImageSet tr = load_fashion_mnist(kFashionMnistDir, true);
  static const ImageSet te = load_fashion_mnist(kFashionMnistDir, false);
  return train ? tr : te;
}

// n images of C x H x W whose label is their index (num_classes = n), so a
// batch's labels say which samples it holds; pixels are pseudo-random.
ImageSet synthetic_set(int64_t n, int64_t C = 1, int64_t H = 6, int64_t W = 5) {
  ImageSet s;
  s.count = n;
  s.channels = C;
  s.height = H;
  s.width = W;
  s.num_classes = int(n);
  s.name = "synthetic";
  PhiloxStream rng(42, 7);
  s.pixels.resize(size_t(n * C * H * W));
  for (auto& p : s.pixels) p = uint8_t(rng.next_u32() % 255 + 1);  // never 0: padding is visible
  for (int64_t i = 0; i < n; ++i) s.labels.push_back(i);
  return s;
}

// Every batch of one epoch: the sample indices (labels) in order, and the
// images by sample index (the last one seen wins; duplicates are equal).
struct Epoch {
  std::vector<int64_t> order;
  std::vector<int64_t> sizes;
  std::map<int64_t, Bytes> images;
};

Epoch run_epoch(BatchIterator& it, int epoch) {
  it.start_epoch(epoch);
  Epoch e;
  Batch b;
  while (it.next(b)) {
    REQUIRE(b.images.dtype() == DType::u8);
    REQUIRE(b.labels.dtype() == DType::i64);
    REQUIRE(b.images.ndim() == 4);
    REQUIRE(b.images.size(0) == b.size);
    REQUIRE(b.labels.numel() == b.size);
    REQUIRE(b.images.device().is_cpu());
    const int64_t ib = b.images.numel() / b.size;
    e.sizes.push_back(b.size);
    for (int64_t i = 0; i < b.size; ++i) {
      const int64_t s = b.labels.data<int64_t>()[i];
      e.order.push_back(s);
      const uint8_t* p = b.images.data<uint8_t>() + i * ib;
      e.images[s] = Bytes(p, p + ib);
    }
  }
  return e;
}

std::vector<int64_t> iota64(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

// torchvision's reference: zero-pad by `pad`, crop at (top, left) = (dy+pad, dx+pad), then mirror.
Bytes reference_augment(const Bytes& src, int64_t C, int64_t H, int64_t W, int pad, const AugmentParams& p) {
  const int64_t PH = H + 2 * pad, PW = W + 2 * pad;
  Bytes padded(size_t(C * PH * PW), 0);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        padded[size_t((c * PH + y + pad) * PW + x + pad)] = src[size_t((c * H + y) * W + x)];
  Bytes crop(size_t(C * H * W));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        crop[size_t((c * H + y) * W + x)] = padded[size_t((c * PH + y + p.dy + pad) * PW + x + p.dx + pad)];
  if (!p.flip) return crop;
  Bytes out(crop.size());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) out[size_t((c * H + y) * W + x)] = crop[size_t((c * H + y) * W + W - 1 - x)];
  return out;
}

// Restores the OpenMP thread count at the end of a test.
struct ThreadsGuard {
  int saved = num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

}  // namespace

// ---------------------------------------------------------------- IDX reader

TEST_CASE("idx: the real Fashion-MNIST files") {
  const IdxArray images = read_idx(std::string(kFashionMnistDir) + "/train-images-idx3-ubyte.gz");
  CHECK(images.dims == std::vector<int64_t>{60000, 28, 28});
  CHECK(images.bytes.size() == size_t(60000) * 28 * 28);
  const IdxArray labels = read_idx(std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz");
  CHECK(labels.dims == std::vector<int64_t>{10000});
  CHECK(labels.bytes.size() == 10000u);
}

TEST_CASE("idx: round trip of a small file, plain and gzip'd") {
  TempDir dir;
  const Bytes data = iota_bytes(24);
  write_bytes(dir.file("a.idx"), idx_bytes({2, 3, 4}, data));
  write_gz(dir.file("a.idx.gz"), idx_bytes({2, 3, 4}, data));
  for (const char* name : {"a.idx", "a.idx.gz"}) {
    CAPTURE(name);
    const IdxArray a = read_idx(dir.file(name));
    CHECK(a.dims == std::vector<int64_t>{2, 3, 4});
    CHECK(a.bytes == data);
  }
  // Four dimensions is the most accepted; max_bytes is inclusive.
  write_bytes(dir.file("b.idx"), idx_bytes({1, 2, 3, 4}, data));
  CHECK(read_idx(dir.file("b.idx"), 24).dims.size() == 4);
  CHECK_ERROR_HAS(read_idx(dir.file("b.idx"), 23), "more than 23 bytes");
}

TEST_CASE("idx: bad headers are rejected with the path and the reason") {
  TempDir dir;
  const std::string p = dir.file("bad.idx");
  const Bytes data = iota_bytes(12);

  Bytes b = idx_bytes({3, 4}, data);
  b[0] = 0x01;
  write_bytes(p, b);
  CHECK_ERROR_HAS(read_idx(p), p + ": bad magic");

  b = idx_bytes({3, 4}, data);
  b[1] = 0x08;
  write_bytes(p, b);
  CHECK_ERROR_HAS(read_idx(p), "bad magic");

  write_bytes(p, idx_bytes({3, 4}, Bytes(48), 0x0D));  // float32 IDX
  CHECK_ERROR_HAS(read_idx(p), p + ": unsupported IDX dtype 0xd");

  write_bytes(p, idx_bytes({}, {}));
  CHECK_ERROR_HAS(read_idx(p), p + ": bad IDX header: 0 dimensions");

  write_bytes(p, idx_bytes({1, 1, 1, 1, 12}, data));
  CHECK_ERROR_HAS(read_idx(p), "5 dimensions");

  write_bytes(p, idx_bytes({3, 0, 4}, {}));
  CHECK_ERROR_HAS(read_idx(p), "dimension 1 is 0");

  // 60000^3 > 2^31 (and 0xFFFFFFFF^4 overflows 64 bits): caught before allocating.
  write_bytes(p, idx_bytes({60000, 60000, 60000}, data));
  CHECK_ERROR_HAS(read_idx(p), p + ": bad IDX header: dimensions ask for more than 2147483648 bytes");
  write_bytes(p, idx_bytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, data));
  CHECK_ERROR_HAS(read_idx(p), "dimensions ask for more than");
}

TEST_CASE("idx: truncation at every stage, trailing data, missing files") {
  TempDir dir;
  const std::string p = dir.file("t.idx");
  const Bytes full = idx_bytes({3, 4}, iota_bytes(12));  // 4 + 8 + 12 bytes

  write_bytes(p, {});
  CHECK_ERROR_HAS(read_idx(p), p + ": truncated: file has 0 bytes, an IDX header needs at least 4");
  write_bytes(p, full, 2);
  CHECK_ERROR_HAS(read_idx(p), "truncated: file has 2 bytes");
  write_bytes(p, full, 9);
  CHECK_ERROR_HAS(read_idx(p), p + ": truncated: header says 2 dimensions (8 bytes), file has 5 of them");
  write_bytes(p, full, 12);
  CHECK_ERROR_HAS(read_idx(p), p + ": truncated: header says 12 bytes of data, file has 0");
  write_bytes(p, full, full.size() - 1);
  CHECK_ERROR_HAS(read_idx(p), p + ": truncated: header says 12 bytes of data, file has 11");
  // The same inside a well-formed gzip stream.
  write_gz(p, Bytes(full.begin(), full.end() - 5));
  CHECK_ERROR_HAS(read_idx(p), p + ": truncated: header says 12 bytes of data, file has 7");

  Bytes longer = full;
  longer.insert(longer.end(), {1, 2, 3});
  write_bytes(p, longer);
  CHECK_ERROR_HAS(read_idx(p), p + ": trailing data: 3 bytes after the 12 bytes of data");
  write_gz(p, longer);
  CHECK_ERROR_HAS(read_idx(p), "trailing data: 3 bytes");

  CHECK_ERROR_HAS(read_idx(dir.file("nope.idx")), dir.file("nope.idx") + ": cannot open: No such file");
}

TEST_CASE("idx: damaged gzip streams") {
  TempDir dir;
  const std::string good = dir.file("g.idx.gz"), p = dir.file("d.idx.gz");
  // Enough data that the compressed stream has a body to damage.
  Bytes data(5000);
  PhiloxStream rng(1, 2);
  for (auto& v : data) v = uint8_t(rng.next_u32() & 0x0F);
  write_gz(good, idx_bytes({50, 100}, data));
  const Bytes gz = read_file(good);
  REQUIRE(gz.size() > 100);
  REQUIRE(read_idx(good).bytes == data);

  // Cut in the middle of the deflate stream, and inside the 8-byte trailer
  // (crc32, length); then a flipped CRC. The path appears once.
  const auto once = [&](const std::string& m) { return m.find(p) == 0 && m.find(p, 1) == std::string::npos; };
  write_bytes(p, gz, gz.size() / 2);
  std::string msg = error_of([&] { read_idx(p); });
  CHECK(msg == p + ": gzip error: unexpected end of file");
  CHECK(once(msg));
  write_bytes(p, gz, gz.size() - 3);
  CHECK(error_of([&] { read_idx(p); }) == p + ": gzip error: unexpected end of file");
  Bytes bad_crc = gz;
  bad_crc[gz.size() - 8] ^= 0xFF;
  write_bytes(p, bad_crc);
  msg = error_of([&] { read_idx(p); });
  CHECK(msg == p + ": gzip error: incorrect data check");
  CHECK(once(msg));
}

// ------------------------------------------------------------- Fashion-MNIST

TEST_CASE("fashion-mnist: the Debian files load with the known statistics") {
  for (bool train : {true, false}) {
    CAPTURE(train);
    const ImageSet& s = fashion(train);
    const int64_t n = train ? 60000 : 10000;
    CHECK(s.count == n);
    CHECK(s.channels == 1);
    CHECK(s.height == 28);
    CHECK(s.width == 28);
    CHECK(s.num_classes == 10);
    CHECK(s.name == (train ? "fashion-mnist/train" : "fashion-mnist/test"));
    CHECK(s.pixels.size() == size_t(n * 28 * 28));
    REQUIRE(s.labels.size() == size_t(n));
    std::vector<int64_t> hist(10, 0);
    for (int64_t l : s.labels) {
      REQUIRE(l >= 0);
      REQUIRE(l < 10);
      ++hist[size_t(l)];
    }
    CHECK(hist == std::vector<int64_t>(10, n / 10));
    // Mean pixel: 0.2860 (train) and 0.2868 (test) of 255, the usual normalisation constants.
    double sum = 0;
    for (uint8_t p : s.pixels) sum += p;
    CHECK(sum / double(s.pixels.size()) / 255.0 == doctest::Approx(train ? 0.2860 : 0.2868).epsilon(0.002));
  }
  CHECK(fashion(true).labels[0] == 9);
  CHECK(std::string(kFashionMnistClassNames[9]) == "Ankle boot");
  CHECK(std::string(kFashionMnistClassNames[0]) == "T-shirt/top");
  CHECK(fashion(false).labels[0] == 9);  // the first test image is an ankle boot too
}

TEST_CASE("fashion-mnist: crafted directories") {
  TempDir dir;
  const std::string d = dir.path.string();
  const Bytes px = iota_bytes(3 * 28 * 28);
  auto write_set = [&](const std::vector<uint32_t>& img_dims, const Bytes& pixels, const Bytes& labels) {
    fs::remove(dir.file("t10k-images-idx3-ubyte.gz"));
    fs::remove(dir.file("t10k-labels-idx1-ubyte"));
    write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes(img_dims, pixels));
    write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_bytes({uint32_t(labels.size())}, labels));  // plain works too
  };

  write_set({3, 28, 28}, px, {4, 0, 9});
  const ImageSet ok = load_fashion_mnist(d, false);
  CHECK(ok.count == 3);
  CHECK(ok.labels == std::vector<int64_t>{4, 0, 9});
  CHECK(ok.pixels == px);

  write_set({3, 28, 28}, px, {4, 10, 9});
  CHECK_ERROR_HAS(load_fashion_mnist(d, false),
                  dir.file("t10k-labels-idx1-ubyte") + ": label 10 of image 1 is outside [0, 10)");

  write_set({3, 28, 28}, px, {4, 0});
  CHECK_ERROR_HAS(load_fashion_mnist(d, false), "holds 3 images but " + dir.file("t10k-labels-idx1-ubyte") +
                                                    " holds 2 labels");

  write_set({3, 27, 28}, Bytes(3 * 27 * 28), {4, 0, 9});
  CHECK_ERROR_HAS(load_fashion_mnist(d, false), "expected images of shape [n, 28, 28], file holds [3, 27, 28]");

  write_set({3, 784}, px, {4, 0, 9});
  CHECK_ERROR_HAS(load_fashion_mnist(d, false), "file holds [3, 784]");

  // The train files are not there.
  const std::string missing = error_of([&] { load_fashion_mnist(d, true); });
  CHECK(contains(missing, dir.file("train-images-idx3-ubyte.gz") + " not found"));
  CHECK(contains(missing, "dataset-fashion-mnist"));
  CHECK(contains(missing, "--data-dir"));

  const std::string no_dir = error_of([&] { load_fashion_mnist(d + "/no/such/dir", true); });
  CHECK(contains(no_dir, "directory " + d + "/no/such/dir does not exist"));
  CHECK(contains(no_dir, "Debian package dataset-fashion-mnist"));
  CHECK(contains(no_dir, "--data-dir"));
}

TEST_CASE("image set: subset and checks") {
  const ImageSet s = synthetic_set(10, 2, 3, 4);
  const ImageSet sub = subset(s, 3, 4);
  CHECK(sub.count == 4);
  CHECK(sub.channels == 2);
  CHECK(sub.num_classes == 10);
  CHECK(sub.labels == std::vector<int64_t>{3, 4, 5, 6});
  CHECK(sub.pixels == Bytes(s.pixels.begin() + 3 * 24, s.pixels.begin() + 7 * 24));
  CHECK(sub.name == "synthetic[3:7]");
  CHECK(subset(s, 10, 0).count == 0);
  CHECK_ERROR_HAS(subset(s, 8, 3), "subset [8, 11) is outside the 10 images");
  CHECK_ERROR_HAS(subset(s, -1, 3), "outside");

  ImageSet bad = s;
  bad.labels[2] = 10;
  CHECK_ERROR_HAS(check_image_set(bad), "label 10 of image 2 is outside [0, 10)");
  bad = s;
  bad.pixels.pop_back();
  CHECK_ERROR_HAS(check_image_set(bad), "pixel bytes");
  bad = s;
  bad.labels.pop_back();
  CHECK_ERROR_HAS(check_image_set(bad), "9 labels for 10 images");
}

// -------------------------------------------------------------- augmentation

TEST_CASE("augment: pad 0 without flip is the identity and draws nothing") {
  const ImageSet s = synthetic_set(1, 3, 5, 7);
  Bytes out(s.pixels.size(), 0);
  PhiloxStream rng(5, 9), untouched(5, 9);
  augment_image(s.pixels.data(), out.data(), 3, 5, 7, 0, false, rng);
  CHECK(out == s.pixels);
  CHECK(rng.next_u32() == untouched.next_u32());
  const AugmentParams p = draw_augment(rng, 0, false);
  CHECK(p.dy == 0);
  CHECK(p.dx == 0);
  CHECK(!p.flip);
}

TEST_CASE("augment: flip mirrors each row exactly") {
  const int64_t C = 3, H = 5, W = 7;
  const ImageSet s = synthetic_set(1, C, H, W);
  Bytes out(s.pixels.size(), 0);
  apply_augment(s.pixels.data(), out.data(), C, H, W, {0, 0, true});
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        REQUIRE(out[size_t((c * H + y) * W + x)] == s.pixels[size_t((c * H + y) * W + W - 1 - x)]);
  // Flipping twice gives the original back.
  Bytes back(out.size());
  apply_augment(out.data(), back.data(), C, H, W, {0, 0, true});
  CHECK(back == s.pixels);
}

TEST_CASE("augment: every crop offset and flip matches torchvision's pad-crop-flip") {
  const int64_t C = 2, H = 6, W = 5;
  const ImageSet s = synthetic_set(1, C, H, W);
  for (int pad : {1, 2, 7}) {  // 7 > H and W: whole-padding crops
    for (int dy = -pad; dy <= pad; ++dy)
      for (int dx = -pad; dx <= pad; ++dx)
        for (bool flip : {false, true}) {
          CAPTURE(pad);
          CAPTURE(dy);
          CAPTURE(dx);
          CAPTURE(flip);
          const AugmentParams p{dy, dx, flip};
          Bytes out(s.pixels.size(), 77);
          apply_augment(s.pixels.data(), out.data(), C, H, W, p);
          REQUIRE(out == reference_augment(s.pixels, C, H, W, pad, p));
          // The source is never 0, so zeros are exactly the out-of-image pixels.
          const int64_t rows = std::max<int64_t>(0, H - std::abs(dy)), cols = std::max<int64_t>(0, W - std::abs(dx));
          REQUIRE(std::count(out.begin(), out.end(), 0) == C * (H * W - rows * cols));
        }
  }
}

TEST_CASE("augment: drawn offsets stay in [-pad, pad], cover it, and flips are about 50%") {
  const int pad = 2, draws = 4000;
  PhiloxStream rng(123, 4);
  std::map<int, int> dy_hist, dx_hist;
  int flips = 0;
  for (int i = 0; i < draws; ++i) {
    const AugmentParams p = draw_augment(rng, pad, true);
    REQUIRE(p.dy >= -pad);
    REQUIRE(p.dy <= pad);
    REQUIRE(p.dx >= -pad);
    REQUIRE(p.dx <= pad);
    ++dy_hist[p.dy];
    ++dx_hist[p.dx];
    flips += p.flip;
  }
  CHECK(dy_hist.size() == 5u);
  CHECK(dx_hist.size() == 5u);
  for (int v = -pad; v <= pad; ++v) {  // 800 expected, sd ~25
    CHECK(dy_hist[v] > 650);
    CHECK(dy_hist[v] < 950);
    CHECK(dx_hist[v] > 650);
    CHECK(dx_hist[v] < 950);
  }
  CHECK(double(flips) / draws == doctest::Approx(0.5).epsilon(0.08));  // sd ~0.008
  // No flip requested: never flipped.
  for (int i = 0; i < 100; ++i) REQUIRE(!draw_augment(rng, pad, false).flip);
}

// ------------------------------------------------------------- BatchIterator

TEST_CASE("batches: each epoch is a permutation; epochs differ; seeds reproduce") {
  const ImageSet s = synthetic_set(1000);
  BatchIterator::Options o;
  o.batch_size = 128;
  o.seed = 17;
  BatchIterator it(s, o);
  CHECK(it.batches_per_epoch() == 8);
  CHECK(it.samples_per_epoch() == 1000);

  const Epoch e0 = run_epoch(it, 0);
  CHECK(e0.sizes == std::vector<int64_t>{128, 128, 128, 128, 128, 128, 128, 104});
  std::vector<int64_t> sorted = e0.order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota64(1000));
  CHECK(e0.order != iota64(1000));
  CHECK(e0.order == epoch_order(1000, true, 17, 0));

  const Epoch e1 = run_epoch(it, 1);
  sorted = e1.order;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == iota64(1000));
  CHECK(e1.order != e0.order);

  // A new iterator with the same seed gives the same epochs, in any order of calls.
  BatchIterator again(s, o);
  CHECK(run_epoch(again, 1).order == e1.order);
  CHECK(run_epoch(again, 0).order == e0.order);
  o.seed = 18;
  BatchIterator other(s, o);
  CHECK(run_epoch(other, 0).order != e0.order);

  // Images come with their own labels (no augmentation: exact copies).
  for (const auto& [idx, img] : e0.images)
    REQUIRE(img == Bytes(s.pixels.begin() + idx * 30, s.pixels.begin() + (idx + 1) * 30));
}

TEST_CASE("batches: without shuffle the order is 0..n-1; end of epoch and restart") {
  const ImageSet s = synthetic_set(10);
  BatchIterator::Options o;
  o.batch_size = 3;  // does not divide 10
  o.shuffle = false;
  BatchIterator it(s, o);
  CHECK(it.batches_per_epoch() == 4);
  const Epoch e = run_epoch(it, 5);
  CHECK(e.order == iota64(10));
  CHECK(e.sizes == std::vector<int64_t>{3, 3, 3, 1});
  Batch b;
  CHECK(!it.next(b));
  CHECK(!it.next(b));
  it.start_epoch(6);
  REQUIRE(it.next(b));
  CHECK(b.size == 3);
  CHECK(b.images.shape() == Shape({3, 1, 6, 5}));
  CHECK(b.labels.to_double_vector() == std::vector<double>{0, 1, 2});

  // The constructor starts epoch 0.
  BatchIterator fresh(s, o);
  REQUIRE(fresh.next(b));
  CHECK(fresh.epoch() == 0);
}

TEST_CASE("batches: drop_last") {
  const ImageSet s = synthetic_set(1000);
  BatchIterator::Options o;
  o.batch_size = 128;
  o.drop_last = true;
  BatchIterator it(s, o);
  CHECK(it.batches_per_epoch() == 7);
  CHECK(it.samples_per_epoch() == 896);
  const Epoch e = run_epoch(it, 3);
  CHECK(e.sizes == std::vector<int64_t>(7, 128));
  CHECK(std::set<int64_t>(e.order.begin(), e.order.end()).size() == 896u);
  // The kept samples are the first 896 of the epoch's permutation.
  const std::vector<int64_t> perm = epoch_order(1000, true, 0, 3);
  CHECK(e.order == std::vector<int64_t>(perm.begin(), perm.begin() + 896));

  o.batch_size = 100;  // divides n: nothing dropped
  BatchIterator exact(s, o);
  CHECK(exact.batches_per_epoch() == 10);
  CHECK(run_epoch(exact, 0).order.size() == 1000u);

  o.batch_size = 2000;  // larger than the data: no full batch at all
  BatchIterator none(s, o);
  CHECK(none.batches_per_epoch() == 0);
  Batch b;
  CHECK(!none.next(b));
}

TEST_CASE("batches: augmented content is independent of thread count and batch size") {
  ThreadsGuard guard;
  const ImageSet s = synthetic_set(500, 3, 8, 8);
  BatchIterator::Options o;
  o.batch_size = 64;
  o.pad = 2;
  o.flip = true;
  o.seed = 99;

  set_num_threads(1);
  BatchIterator one(s, o);
  const Epoch a = run_epoch(one, 2);
  set_num_threads(2);
  BatchIterator two(s, o);
  const Epoch b = run_epoch(two, 2);
  set_num_threads(4);
  o.batch_size = 7;
  BatchIterator small(s, o);
  const Epoch c = run_epoch(small, 2);

  CHECK(a.order == b.order);
  CHECK(a.order == c.order);
  CHECK(a.images == b.images);
  CHECK(a.images == c.images);

  // Augmentation did happen, and each sample used its own (seed, epoch, index) stream.
  int changed = 0;
  for (const auto& [idx, img] : a.images) {
    const uint8_t* src = s.pixels.data() + idx * 192;
    changed += img != Bytes(src, src + 192);
    PhiloxStream rng(99, sample_stream_id(2, idx));
    Bytes expect(192);
    augment_image(src, expect.data(), 3, 8, 8, 2, true, rng);
    REQUIRE(img == expect);
  }
  CHECK(changed > 400);  // identity has probability 1/50 per sample
  // Another epoch augments differently.
  set_num_threads(2);
  const Epoch d = run_epoch(two, 3);
  CHECK(d.images != a.images);
}

TEST_CASE("batches: start_epoch at a batch continues the epoch exactly (resume)") {
  const ImageSet s = synthetic_set(100, 1, 6, 6);
  BatchIterator::Options o;
  o.batch_size = 16;  // 7 batches, the last one of 4
  o.pad = 1;
  o.flip = true;
  o.seed = 3;
  BatchIterator whole(s, o);
  const Epoch full = run_epoch(whole, 4);
  REQUIRE(full.sizes.size() == 7);
  for (int64_t first = 0; first <= 7; ++first) {
    BatchIterator resumed(s, o);
    resumed.start_epoch(4, first);
    CHECK(resumed.position() == first);
    Batch b;
    std::vector<int64_t> order;
    while (resumed.next(b)) {
      for (int64_t i = 0; i < b.size; ++i) {
        const int64_t id = b.labels.data<int64_t>()[i];
        order.push_back(id);
        const uint8_t* p = b.images.data<uint8_t>() + i * 36;
        CHECK(Bytes(p, p + 36) == full.images.at(id));  // the same augmentation as in the whole epoch
      }
    }
    CHECK(resumed.position() == 7);
    CHECK(order == std::vector<int64_t>(full.order.begin() + std::min<int64_t>(first * 16, 100), full.order.end()));
  }
  BatchIterator bad(s, o);
  CHECK_THROWS_WITH_AS(bad.start_epoch(0, 8), doctest::Contains("batch 8 is outside epoch 0's 7 batches"), Error);
}

TEST_CASE("batches: sharding over world = 3 covers the epoch with equal counts") {
  const int64_t n = 1000;  // 1000 = 3 * 333 + 1: ranks get 334, two samples repeat
  const ImageSet s = synthetic_set(n);
  BatchIterator::Options o;
  o.batch_size = 50;
  o.seed = 3;
  o.world = 3;
  std::vector<Epoch> shards;
  for (int r = 0; r < 3; ++r) {
    o.rank = r;
    BatchIterator it(s, o);
    CHECK(it.samples_per_epoch() == 334);
    CHECK(it.batches_per_epoch() == 7);
    shards.push_back(run_epoch(it, 4));
    CHECK(shards.back().order.size() == 334u);
    CHECK(shards.back().sizes.back() == 34);
  }
  // Interleaving the ranks rebuilds the global permutation, wrapped around.
  const std::vector<int64_t> perm = epoch_order(n, true, 3, 4);
  for (size_t i = 0; i < 334; ++i)
    for (size_t r = 0; r < 3; ++r) REQUIRE(shards[r].order[i] == perm[(3 * i + r) % size_t(n)]);
  std::map<int64_t, int> seen;
  for (const Epoch& e : shards)
    for (int64_t idx : e.order) ++seen[idx];
  CHECK(seen.size() == size_t(n));
  int twice = 0;
  for (const auto& [idx, k] : seen) {
    REQUIRE(k <= 2);
    if (k == 2) {
      ++twice;
      CHECK((idx == perm[0] || idx == perm[1]));  // the padding wraps to the start
    }
  }
  CHECK(twice == 2);

  // Fewer samples than ranks: everyone still gets one.
  const ImageSet tiny = synthetic_set(2);
  o.shuffle = false;
  o.rank = 2;
  BatchIterator it(tiny, o);
  CHECK(run_epoch(it, 0).order == std::vector<int64_t>{0});
  CHECK(shard_order({5, 6}, 1, 3) == std::vector<int64_t>{6});
}

TEST_CASE("batches: bad options are errors") {
  const ImageSet s = synthetic_set(10);
  BatchIterator::Options o;
  o.batch_size = 0;
  CHECK_ERROR_HAS(BatchIterator(s, o), "batch size 0 must be positive");
  o = {};
  o.rank = 3;
  o.world = 3;
  CHECK_ERROR_HAS(BatchIterator(s, o), "rank 3 of world 3");
  o = {};
  o.pad = -1;
  CHECK_ERROR_HAS(BatchIterator(s, o), "negative crop padding");
  o = {};
  BatchIterator it(s, o);
  CHECK_ERROR_HAS(it.start_epoch(-1), "epoch -1 outside");
  ImageSet broken = s;
  broken.labels.pop_back();
  CHECK_ERROR_HAS(BatchIterator(broken, o), "9 labels for 10 images");
  CHECK_ERROR_HAS(BatchIterator(subset(s, 0, 0), o), "no images");
}
