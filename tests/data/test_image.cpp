// tests/data/test_image.cpp — data/image.cpp: format sniffing, decode errors,
// PNG/JPEG round trips, the bilinear resize against a double-precision
// reference (the definition in data/image.cpp's top comment), flips, and
// the short-side resize's shapes.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/image.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using namespace ember::data;

namespace {

using Bytes = std::vector<uint8_t>;
using ember::testing::error_of;

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Uniformly random pixels.
Image random_image(int h, int w, int c, uint64_t seed) {
  Image img;
  img.height = h, img.width = w, img.channels = c;
  img.pixels.resize(size_t(h) * size_t(w) * size_t(c));
  PhiloxStream rng(seed, 1);
  for (auto& p : img.pixels) p = uint8_t(rng.next_u32());
  return img;
}

// A smooth picture (gradients and a soft blob) with a little noise: what JPEG is made for.
Image smooth_image(int h, int w, int c, uint64_t seed) {
  Image img;
  img.height = h, img.width = w, img.channels = c;
  img.pixels.resize(size_t(h) * size_t(w) * size_t(c));
  PhiloxStream rng(seed, 2);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        const double blob =
            80.0 * std::exp(-((x - w / 3.0) * (x - w / 3.0) + (y - h / 2.0) * (y - h / 2.0)) / (w * h / 8.0));
        const double v = 40 + 120.0 * x / w + 50.0 * y / h * (ch + 1) / c + blob + double(rng.next_u32() % 5);
        img.pixels[(size_t(y) * size_t(w) + size_t(x)) * size_t(c) + size_t(ch)] = uint8_t(std::clamp(v, 0.0, 255.0));
      }
  return img;
}

// The bilinear definition of data/image.cpp in double precision: output
// pixel (c, y, x) of box resized to oh x ow, planar, rounded.
Bytes reference_resize(const Image& src, const Box& box, int oh, int ow, bool flip) {
  auto axis = [](int o, int src_len, int out_len, int& i0, int& i1, double& t) {
    const double f = (o + 0.5) * double(src_len) / double(out_len) - 0.5;
    int i = int(std::floor(f));
    t = f - i;
    if (i < 0) i = 0, t = 0;
    if (i >= src_len - 1) i = src_len - 1, t = 0;
    i0 = i;
    i1 = std::min(i + 1, src_len - 1);
  };
  const int C = src.channels;
  Bytes out(size_t(C) * size_t(oh) * size_t(ow));
  auto px = [&](int y, int x, int c) {
    return double(src.pixels[(size_t(box.y + y) * size_t(src.width) + size_t(box.x + x)) * size_t(C) + size_t(c)]);
  };
  for (int y = 0; y < oh; ++y) {
    int y0, y1;
    double ty;
    axis(y, box.height, oh, y0, y1, ty);
    for (int x = 0; x < ow; ++x) {
      int x0, x1;
      double tx;
      axis(x, box.width, ow, x0, x1, tx);
      const int xo = flip ? ow - 1 - x : x;
      for (int c = 0; c < C; ++c) {
        const double top = (1 - tx) * px(y0, x0, c) + tx * px(y0, x1, c);
        const double bottom = (1 - tx) * px(y1, x0, c) + tx * px(y1, x1, c);
        const double v = (1 - ty) * top + ty * bottom;
        out[(size_t(c) * size_t(oh) + size_t(y)) * size_t(ow) + size_t(xo)] = uint8_t(std::lround(v));
      }
    }
  }
  return out;
}

int max_abs_diff(const Bytes& a, const Bytes& b) {
  REQUIRE(a.size() == b.size());
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int(a[i]) - int(b[i])));
  return m;
}

}  // namespace

TEST_CASE("image: sniff_encoding") {
  const Bytes jpeg_magic = {0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10};
  const Bytes png_magic = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0};
  CHECK(sniff_encoding(jpeg_magic.data(), jpeg_magic.size()) == Encoding::jpeg);
  CHECK(sniff_encoding(png_magic.data(), png_magic.size()) == Encoding::png);
  const Bytes bmp = {'B', 'M', 0x36, 0, 0, 0};
  CHECK(sniff_encoding(bmp.data(), bmp.size()) == Encoding::other);
  CHECK(sniff_encoding(png_magic.data(), 7) == Encoding::other);  // too short for the PNG signature
  CHECK(sniff_encoding(jpeg_magic.data(), 2) == Encoding::other);
  CHECK(sniff_encoding(nullptr, 0) == Encoding::other);
  Bytes png_broken = png_magic;
  png_broken[1] = 'p';
  CHECK(sniff_encoding(png_broken.data(), png_broken.size()) == Encoding::other);

  const Image img = smooth_image(9, 7, 3, 1);
  Bytes enc;
  encode_jpeg(img, 90, enc);
  CHECK(sniff_encoding(enc.data(), enc.size()) == Encoding::jpeg);
  encode_png(img, enc);
  CHECK(sniff_encoding(enc.data(), enc.size()) == Encoding::png);
}

TEST_CASE("image: decode errors name the image") {
  Image out;
  const Bytes garbage = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e', 0, 1, 2, 3};
  std::string msg = error_of([&] { decode_image(garbage.data(), garbage.size(), 3, out, "photos/cat/3.jpg"); });
  CHECK_MESSAGE(starts_with(msg, "photos/cat/3.jpg: not a decodable image ("), msg);

  msg = error_of([&] { decode_image(garbage.data(), 0, 3, out, "empty.png"); });
  CHECK_MESSAGE(starts_with(msg, "empty.png: not a decodable image"), msg);

  // A JPEG cut inside its headers, and a PNG cut inside its first chunk.
  Bytes jpeg, png;
  const Image img = smooth_image(32, 40, 3, 2);
  encode_jpeg(img, 90, jpeg);
  encode_png(img, png);
  for (size_t cut : {size_t(2), size_t(20), size_t(60)}) {
    INFO("JPEG cut to ", cut, " of ", jpeg.size(), " bytes");
    msg = error_of([&] { decode_image(jpeg.data(), cut, 3, out, "cut.jpg"); });
    CHECK_MESSAGE(starts_with(msg, "cut.jpg: not a decodable image ("), msg);
  }
  msg = error_of([&] { decode_image(png.data(), 30, 0, out, "cut.png"); });
  CHECK_MESSAGE(starts_with(msg, "cut.png: not a decodable image ("), msg);

  // A PNG with a corrupt zlib stream: stb checks the data.
  Bytes bad_png = png;
  for (size_t i = 60; i < bad_png.size() - 20; ++i) bad_png[i] = uint8_t(bad_png[i] ^ 0x5A);
  msg = error_of([&] { decode_image(bad_png.data(), bad_png.size(), 3, out, "bad.png"); });
  CHECK_MESSAGE(starts_with(msg, "bad.png: not a decodable image ("), msg);

  msg = error_of([&] { decode_image(png.data(), png.size(), 2, out, "x.png"); });
  CHECK_MESSAGE(starts_with(msg, "x.png: cannot decode to 2 channels"), msg);

  // The whole files decode.
  decode_image(jpeg.data(), jpeg.size(), 3, out, "ok.jpg");
  CHECK(out.height == 32);
  CHECK(out.width == 40);
}

// Found by tests/fuzz/fuzz_png (regression inputs in tests/fuzz/corpus/fuzz_png/regress-*).
TEST_CASE("image: PNG chunks that lie about their length, and chunk names in messages") {
  Bytes png;
  encode_png(smooth_image(4, 5, 3, 1), png);
  const size_t idat = std::search(png.begin(), png.end(), std::begin("IDAT"), std::begin("IDAT") + 4) - png.begin() - 4;
  REQUIRE(idat > 8);
  Image out;
  // An IDAT declaring ~2 GB in a 100-byte file: stb_image reserved that much
  // before finding the bytes missing; now refused up front.
  Bytes lying = png;
  lying[idat] = 0x7f, lying[idat + 1] = 0xff, lying[idat + 2] = 0xff, lying[idat + 3] = 0x00;
  std::string msg = error_of([&] { decode_image(lying.data(), lying.size(), 3, out, "lying.png"); });
  CHECK_MESSAGE(starts_with(msg, "lying.png: not a decodable image (PNG chunk 'IDAT' at byte "), msg);
  CHECK_MESSAGE(msg.find("declares 2147483392 bytes, past the end of the") != std::string::npos, msg);
  // An unknown critical chunk whose name holds a newline: stb_image quotes the
  // name in its reason; the message stays one printable line.
  Bytes named = png;
  named[idat + 4] = '\n', named[idat + 5] = 'D', named[idat + 6] = '\r', named[idat + 7] = 'T';
  msg = error_of([&] { decode_image(named.data(), named.size(), 3, out, "named.png"); });
  CHECK_MESSAGE(starts_with(msg, "named.png: not a decodable image ("), msg);
  CHECK_MESSAGE(std::none_of(msg.begin(), msg.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }), msg);
}

// Found by tests/fuzz/fuzz_jpeg, fuzz_png and fuzz_mxnet_recordio (regress-* inputs).
TEST_CASE("image: a header declaring more pixels than the bytes can code is refused") {
  Bytes jpeg;
  encode_jpeg(smooth_image(8, 8, 3, 1), 90, jpeg);
  size_t sof = 2;
  while (sof + 9 < jpeg.size() && !(jpeg[sof] == 0xFF && jpeg[sof + 1] == 0xC0)) ++sof;
  REQUIRE(sof + 9 < jpeg.size());
  Bytes big = jpeg;  // 760 x 65518 in a few hundred bytes: stb_image decoded 50 Mpixels of zeros
  big[sof + 5] = 0x02, big[sof + 6] = 0xF8, big[sof + 7] = 0xFF, big[sof + 8] = 0xEE;
  Image out;
  const std::string msg = error_of([&] { decode_image(big.data(), big.size(), 3, out, "big.jpg"); });
  CHECK_MESSAGE(starts_with(msg, "big.jpg: not a decodable image (65518x760 pixels cannot be coded in "), msg);
  decode_image(jpeg.data(), jpeg.size(), 3, out, "ok.jpg");  // the real one still decodes
  CHECK(out.width == 8);
}

TEST_CASE("image: PNG round trip is exact, 1 and 3 channels") {
  for (int c : {1, 3}) {
    INFO("channels ", c);
    const Image img = random_image(13, 17, c, uint64_t(10 + c));
    Bytes png;
    encode_png(img, png);
    Image back;
    decode_image(png.data(), png.size(), 0, back, "rt.png");  // as stored
    CHECK(back.height == 13);
    CHECK(back.width == 17);
    CHECK(back.channels == c);
    CHECK(back.pixels == img.pixels);
    decode_image(png.data(), png.size(), c, back, "rt.png");
    CHECK(back.pixels == img.pixels);
  }
  // Grey decoded to RGB replicates the grey value; RGB decoded to grey has one channel.
  const Image grey = random_image(5, 6, 1, 3);
  Bytes png;
  encode_png(grey, png);
  Image rgb;
  decode_image(png.data(), png.size(), 3, rgb, "grey.png");
  REQUIRE(rgb.channels == 3);
  bool replicated = true;
  for (size_t i = 0; i < grey.pixels.size(); ++i)
    for (size_t k = 0; k < 3; ++k) replicated = replicated && rgb.pixels[i * 3 + k] == grey.pixels[i];
  CHECK(replicated);
  const Image colour = random_image(5, 6, 3, 4);
  encode_png(colour, png);
  Image g;
  decode_image(png.data(), png.size(), 1, g, "colour.png");
  CHECK(g.channels == 1);
  CHECK(g.pixels.size() == 30u);
}

TEST_CASE("image: JPEG round trip is close") {
  for (int c : {1, 3}) {
    INFO("channels ", c);
    const Image img = smooth_image(48, 64, c, uint64_t(20 + c));
    Bytes jpeg;
    encode_jpeg(img, 95, jpeg);
    Image back;
    decode_image(jpeg.data(), jpeg.size(), c, back, "rt.jpg");
    REQUIRE(back.height == 48);
    REQUIRE(back.width == 64);
    REQUIRE(back.channels == c);
    double err = 0;
    int worst = 0;
    for (size_t i = 0; i < img.pixels.size(); ++i) {
      const int d = std::abs(int(back.pixels[i]) - int(img.pixels[i]));
      err += d;
      worst = std::max(worst, d);
    }
    err /= double(img.pixels.size());
    INFO("mean abs error ", err, ", worst ", worst);
    CHECK(err < 2.0);
    CHECK(worst < 40);
    // Lower quality: smaller file, larger error.
    Bytes low;
    encode_jpeg(img, 20, low);
    CHECK(low.size() < jpeg.size());
  }
  Image bad;
  bad.height = 2, bad.width = 2, bad.channels = 3;  // no pixels
  Bytes out;
  ember::testing::expect_error([&] { encode_jpeg(bad, 90, out); }, "encode_jpeg: bad image");
  ember::testing::expect_error([&] { encode_jpeg(smooth_image(4, 4, 3, 1), 0, out); }, "quality 0");
  ember::testing::expect_error([&] { encode_png(bad, out); }, "encode_png: bad image");
}

TEST_CASE("image: resize_to_planar matches the double-precision bilinear reference") {
  PhiloxStream rng(99, 5);
  int worst = 0;
  int cases = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int C = std::array<int, 4>{1, 3, 2, 4}[size_t(trial % 4)];
    const int h = 1 + int(rng.below(40)), w = 1 + int(rng.below(40));
    const Image src = random_image(h, w, C, uint64_t(1000 + trial));
    Box box;
    box.width = 1 + int(rng.below(uint64_t(w)));
    box.height = 1 + int(rng.below(uint64_t(h)));
    box.x = int(rng.below(uint64_t(w - box.width + 1)));
    box.y = int(rng.below(uint64_t(h - box.height + 1)));
    const int oh = 1 + int(rng.below(50)), ow = 1 + int(rng.below(50));
    const bool flip = rng.below(2) == 1;
    Bytes got(size_t(C) * size_t(oh) * size_t(ow));
    resize_to_planar(src, box, oh, ow, flip, got.data());
    const Bytes want = reference_resize(src, box, oh, ow, flip);
    const int d = max_abs_diff(got, want);
    if (d > 1) {
      INFO("trial ", trial, ": ", h, "x", w, "x", C, " box (", box.x, ",", box.y, ") ", box.width, "x", box.height,
           " -> ", oh, "x", ow, " flip ", flip);
      CHECK(d <= 1);
    }
    worst = std::max(worst, d);
    ++cases;
  }
  CHECK(cases == 300);
  CHECK(worst <= 1);
  // The reference itself is not trivially equal to everything: a shifted grid differs.
  const Image src = random_image(20, 20, 1, 7);
  Bytes a(100), b(100);
  resize_to_planar(src, Box{0, 0, 20, 20}, 10, 10, false, a.data());
  const Bytes ref_shift = reference_resize(src, Box{1, 0, 19, 20}, 10, 10, false);
  CHECK(max_abs_diff(a, ref_shift) > 1);
}

TEST_CASE("image: resize_to_planar identity, planar layout and flip") {
  const Image src = random_image(11, 14, 3, 42);
  const Box box{3, 2, 9, 7};
  Bytes out(size_t(3 * 7 * 9));
  resize_to_planar(src, box, 7, 9, false, out.data());
  bool identity = true;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 7; ++y)
      for (int x = 0; x < 9; ++x)
        identity =
            identity && out[size_t((c * 7 + y) * 9 + x)] == src.pixels[size_t(((box.y + y) * 14 + box.x + x) * 3 + c)];
  CHECK(identity);

  // Flip mirrors the unflipped output left-right, for identity and scaled sizes.
  for (auto [oh, ow] : {std::pair{7, 9}, std::pair{5, 13}, std::pair{12, 4}}) {
    INFO(oh, "x", ow);
    Bytes plain(size_t(3 * oh * ow)), flipped(size_t(3 * oh * ow));
    resize_to_planar(src, box, oh, ow, false, plain.data());
    resize_to_planar(src, box, oh, ow, true, flipped.data());
    bool mirrored = true;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x)
          mirrored =
              mirrored && flipped[size_t((c * oh + y) * ow + x)] == plain[size_t((c * oh + y) * ow + ow - 1 - x)];
    CHECK(mirrored);
    CHECK(plain != flipped);  // the image is not symmetric, so the check above means something
  }

  ember::testing::expect_error(
      [&] {
        resize_to_planar(src, Box{10, 0, 5, 5}, 4, 4, false, out.data());
      },
      "is not inside");
  ember::testing::expect_error([&] { resize_to_planar(src, box, 0, 4, false, out.data()); }, "must be positive");
}

TEST_CASE("image: resize_short_side shapes, aspect ratio and constants") {
  struct Case {
    int h, w, s, want_h, want_w;
  };
  const Case cases[] = {
      {375, 500, 256, 256, 341},  // landscape: 500 * 256 / 375 = 341.3
      {500, 375, 256, 341, 256},  // portrait
      {300, 300, 224, 224, 224},  // square
      {20, 30, 40, 40, 60},       // enlarging
      {7, 1000, 3, 3, 428},       // extreme aspect
      {64, 48, 48, 64, 48},       // already the size: a copy
  };
  for (const Case& c : cases) {
    INFO(c.h, "x", c.w, " -> short side ", c.s);
    const Image src = random_image(c.h, c.w, 3, uint64_t(c.h * 7 + c.w));
    Image out;
    resize_short_side(src, c.s, out);
    CHECK(out.height == c.want_h);
    CHECK(out.width == c.want_w);
    CHECK(out.channels == 3);
    CHECK(out.pixels.size() == size_t(c.want_h) * size_t(c.want_w) * 3);
    CHECK(std::min(out.height, out.width) == c.s);
    // The long side keeps the aspect ratio (truncated).
    const double ratio = double(std::max(c.h, c.w)) / std::min(c.h, c.w);
    CHECK(std::max(out.height, out.width) == int(ratio * c.s + 1e-9));
    if (c.h == c.want_h && c.w == c.want_w) CHECK(out.pixels == src.pixels);
  }
  // A constant image stays constant when shrinking (area averaging) and enlarging.
  for (int s : {5, 17, 33, 90}) {
    INFO("short side ", s);
    Image flat;
    flat.height = 40, flat.width = 52, flat.channels = 3;
    flat.pixels.assign(size_t(40 * 52 * 3), 0);
    for (size_t i = 0; i < flat.pixels.size(); ++i) flat.pixels[i] = uint8_t(i % 3 == 0 ? 200 : i % 3 == 1 ? 7 : 255);
    Image out;
    resize_short_side(flat, s, out);
    bool constant = true;
    for (size_t i = 0; i < out.pixels.size(); ++i)
      constant = constant && out.pixels[i] == (i % 3 == 0 ? 200 : i % 3 == 1 ? 7 : 255);
    CHECK(constant);
  }
  // Shrinking averages: a 2x2 checkerboard halved is its mean everywhere.
  Image board;
  board.height = 8, board.width = 8, board.channels = 1;
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) board.pixels.push_back(uint8_t((x + y) % 2 ? 200 : 100));
  Image half;
  resize_short_side(board, 4, half);
  CHECK(half.pixels == Bytes(16, 150));

  Image out;
  ember::testing::expect_error([&] { resize_short_side(board, 0, out); }, "must be positive");
  ember::testing::expect_error([&] { resize_short_side(board, 4, board); }, "must differ");
}
