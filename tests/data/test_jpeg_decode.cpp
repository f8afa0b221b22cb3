// tests/data/test_jpeg_decode.cpp — the libjpeg-turbo JPEG path of data/image.h
// (data/jpeg_turbo.h): whole decodes against stb_image, crops decoded at
// full scale against the same box of the whole image (bit for bit), reduced
// DCT-scale decodes against the full-size path within the tolerance the
// docs/records.md states, the choice of reduction, errors on corrupt data, CMYK
// through stb_image, and the encoder. Pictures come from
// tests/support/photo_like.h. Skipped in JPEG=stb builds.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/jpeg_turbo.h"
#include "engine/error.h"
#include "engine/rng.h"
#include "tests/support/photo_like.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"

#if EMBER_JPEG_TURBO
#include <cstdio>
#include <jpeglib.h>
#endif

using namespace ember;
using namespace ember::data;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::photo_like_image;

namespace {

using Bytes = std::vector<uint8_t>;

const ember::testing::needs kNeedsTurbo{"this build has no libjpeg-turbo (JPEG=stb)", jpeg_turbo_built};

struct DiffStats {
  double mean = 0;     // mean |a - b| in levels
  int max = 0;         // largest |a - b|
  double over16 = 0;   // fraction of values more than 16 levels apart
};

DiffStats diff(const Bytes& a, const Bytes& b) {
  REQUIRE(a.size() == b.size());
  DiffStats s;
  double sum = 0;
  size_t over = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int d = std::abs(int(a[i]) - int(b[i]));
    sum += d;
    s.max = std::max(s.max, d);
    over += d > 16;
  }
  s.mean = sum / double(a.size());
  s.over16 = double(over) / double(a.size());
  return s;
}

Bytes jpeg_of(const Image& img, int quality = 90) {
  Bytes out;
  encode_jpeg(img, quality, out);
  return out;
}

// The full-size path: the whole image decoded, the box resized bilinearly.
Bytes full_path(const Bytes& jpeg, int channels, const Box& box, int S, bool flip) {
  Image full;
  decode_image(jpeg.data(), jpeg.size(), channels, full, "test.jpg", JpegDecoder::turbo);
  Bytes out(size_t(channels) * size_t(S) * size_t(S));
  resize_to_planar(full, box, S, S, flip, out.data());
  return out;
}

// The loader's path: decode what the box needs, resize from the region.
Bytes region_path(const Bytes& jpeg, int channels, const Box& box, int S, bool flip, DecodedRegion& region) {
  decode_for_resize(jpeg.data(), jpeg.size(), channels, box, S, S, region, "test.jpg");
  Bytes out(size_t(channels) * size_t(S) * size_t(S));
  resize_region_to_planar(region, box, S, S, flip, out.data());
  return out;
}

// An antialiased reference: the box cut from the whole image, then area-averaged to S x S.
Bytes area_path(const Bytes& jpeg, int channels, const Box& box, int S) {
  Image full, crop, small;
  decode_image(jpeg.data(), jpeg.size(), channels, full, "test.jpg", JpegDecoder::turbo);
  crop.height = box.height, crop.width = box.width, crop.channels = channels;
  crop.pixels.resize(size_t(box.height) * size_t(box.width) * size_t(channels));
  for (int y = 0; y < box.height; ++y)
    std::copy_n(full.pixels.data() + (size_t(box.y + y) * size_t(full.width) + size_t(box.x)) * size_t(channels),
                size_t(box.width) * size_t(channels), crop.pixels.data() + size_t(y) * size_t(box.width) * size_t(channels));
  resize_image(crop, S, S, small);
  Bytes out(small.pixels.size());
  const size_t hw = size_t(S) * size_t(S);
  for (size_t i = 0; i < hw; ++i)
    for (int c = 0; c < channels; ++c) out[size_t(c) * hw + i] = small.pixels[i * size_t(channels) + size_t(c)];
  return out;
}

// A box of at least min_side pixels a side, anywhere in an h x w image;
// with `crop_ratio`, an aspect ratio in [3/4, 4/3] as random-resized-crop's.
Box random_box(PhiloxStream& rng, int h, int w, int min_side, bool crop_ratio = false) {
  Box b;
  for (;;) {
    b.width = min_side + int(rng.next_u32() % uint32_t(w - min_side + 1));
    b.height = min_side + int(rng.next_u32() % uint32_t(h - min_side + 1));
    if (!crop_ratio || (4 * b.width >= 3 * b.height && 4 * b.height >= 3 * b.width)) break;
  }
  b.x = int(rng.next_u32() % uint32_t(w - b.width + 1));
  b.y = int(rng.next_u32() % uint32_t(h - b.height + 1));
  return b;
}

}  // namespace

TEST_CASE("jpeg: the reduction is the largest 1/d that keeps the output's pixels (PIL's draft rule)") {
  CHECK(jpeg_reduction_for(375, 500, 224, 224) == 1);
  CHECK(jpeg_reduction_for(448, 448, 224, 224) == 2);
  CHECK(jpeg_reduction_for(447, 448, 224, 224) == 1);
  CHECK(jpeg_reduction_for(375, 500, 128, 128) == 2);
  CHECK(jpeg_reduction_for(1024, 1024, 128, 128) == 8);
  CHECK(jpeg_reduction_for(1023, 4000, 128, 128) == 4);
  CHECK(jpeg_reduction_for(100, 100, 1, 1) == 8);
  CHECK(jpeg_reduction_for(3, 3, 1, 1) == 2);
  CHECK(jpeg_reduction_for(1, 1, 1, 1) == 1);
}

TEST_CASE("jpeg: libjpeg-turbo decodes whole images within a few levels of stb_image" *
          kNeedsTurbo) {
  for (const auto& [h, w, c] : std::vector<std::tuple<int, int, int>>{{375, 500, 3}, {251, 333, 3}, {97, 61, 1}}) {
    CAPTURE(h);
    CAPTURE(w);
    CAPTURE(c);
    const Bytes jpeg = jpeg_of(photo_like_image(h, w, c, uint64_t(h * w)));
    Image a, b;
    decode_image(jpeg.data(), jpeg.size(), c, a, "t.jpg", JpegDecoder::turbo);
    decode_image(jpeg.data(), jpeg.size(), c, b, "t.jpg", JpegDecoder::stb);
    REQUIRE(a.height == h);
    REQUIRE(a.width == w);
    REQUIRE(a.channels == c);
    REQUIRE(b.pixels.size() == a.pixels.size());
    const DiffStats d = diff(a.pixels, b.pixels);
    MESSAGE(h, "x", w, "x", c, " libjpeg-turbo vs stb_image: mean |d| ", d.mean, ", max ", d.max);
    CHECK(d.mean < 1.0);  // the two IDCTs and chroma upsamplers round differently
    CHECK(d.max <= 24);
    const ImageInfo info = probe_image(jpeg.data(), jpeg.size(), "t.jpg");
    CHECK(info.height == h);
    CHECK(info.width == w);
    CHECK(info.encoding == Encoding::jpeg);
  }
}

TEST_CASE("jpeg: a crop decoded at full scale equals the same box of the whole image, bit for bit" *
          kNeedsTurbo) {
  PhiloxStream rng(7, 1);
  int cropped_columns = 0, skipped_rows = 0;
  for (const auto& [h, w, c] : std::vector<std::tuple<int, int, int>>{{375, 500, 3}, {251, 333, 3}, {130, 77, 1}}) {
    const Bytes jpeg = jpeg_of(photo_like_image(h, w, c, 11 + uint64_t(w)));
    for (int t = 0; t < 40; ++t) {
      const Box box = random_box(rng, h, w, 8);
      // An output a little smaller than the box keeps the reduction at 1.
      const int S = std::max(1, std::min(box.height, box.width) * 2 / 3);
      REQUIRE(jpeg_reduction_for(box.height, box.width, S, S) == 1);
      const bool flip = (t & 1) != 0;
      DecodedRegion region;
      const Bytes got = region_path(jpeg, c, box, S, flip, region);
      CAPTURE(box.x);
      CAPTURE(box.y);
      CAPTURE(box.width);
      CAPTURE(box.height);
      REQUIRE(region.denom == 1);
      cropped_columns += region.image.width < w;
      skipped_rows += region.y0 > 0;
      CHECK(region.image.height == box.height);  // only the box's rows
      CHECK(got == full_path(jpeg, c, box, S, flip));
    }
  }
  CHECK(cropped_columns > 60);  // the partial decode really was partial
  CHECK(skipped_rows > 60);
}

// The tolerance docs/records.md states for reduced decodes, on photo-like JPEGs
// (quality 90, 4:2:0) and crop boxes of random-resized-crop's shapes, per
// reduction 1/2, 1/4, 1/8: against the full-size bilinear path, mean |d| <=
// 2, 4, 8 levels with at most 1%, 3%, 8% of values more than 16 levels
// apart; against an antialiased reference (area averaging of the box) mean
// |d| <= 1.5, 2.5, 4 (about as close as the full-size path is: that one
// aliases, sampling 2 of every d pixels where the DCT reduction uses all).
TEST_CASE("jpeg: reduced decodes (1/2, 1/4, 1/8) stay within the stated tolerance of the full-size path" *
          kNeedsTurbo) {
  PhiloxStream rng(8, 2);
  for (const auto& [h, w, c] : std::vector<std::tuple<int, int, int>>{{375, 500, 3}, {600, 800, 3}, {512, 384, 1}}) {
    const Bytes jpeg = jpeg_of(photo_like_image(h, w, c, 99 + uint64_t(h)));
    for (int d : {2, 4, 8}) {
      double worst_mean = 0, worst_area = 0, worst_over = 0, area_sum = 0, full_area_sum = 0;
      int tried = 0;
      for (int t = 0; t < 60 && tried < 12; ++t) {
        const Box box = random_box(rng, h, w, 16 * d, /*crop_ratio=*/true);
        const int S = std::min(box.height, box.width) / d;  // exactly reduction d
        if (S < 8 || jpeg_reduction_for(box.height, box.width, S, S) != d) continue;
        ++tried;
        DecodedRegion region;
        const Bytes got = region_path(jpeg, c, box, S, false, region);
        REQUIRE(region.denom == d);
        CHECK(region.image.height <= (box.height + d - 1) / d + 1);
        const DiffStats full = diff(got, full_path(jpeg, c, box, S, false));
        const Bytes reference = area_path(jpeg, c, box, S);
        const DiffStats area = diff(got, reference);
        area_sum += area.mean;
        full_area_sum += diff(full_path(jpeg, c, box, S, false), reference).mean;
        worst_mean = std::max(worst_mean, full.mean);
        worst_over = std::max(worst_over, full.over16);
        worst_area = std::max(worst_area, area.mean);
      }
      REQUIRE(tried >= 6);
      MESSAGE(h, "x", w, "x", c, " at 1/", d, " (", tried, " boxes): against the full-size path worst mean |d| ",
              worst_mean, ", worst share > 16 levels ", worst_over, "; against area averaging worst mean |d| ",
              worst_area, "; mean |d| from area averaging: this path ", area_sum / tried, ", the full-size path ",
              full_area_sum / tried);
      const int k = d == 2 ? 0 : d == 4 ? 1 : 2;
      CHECK(worst_mean <= std::vector<double>{2, 4, 8}[size_t(k)]);
      CHECK(worst_over <= std::vector<double>{0.01, 0.03, 0.08}[size_t(k)]);
      CHECK(worst_area <= std::vector<double>{1.5, 2.5, 4}[size_t(k)]);
    }
  }
}

TEST_CASE("jpeg: resizing for im2rec from a reduced decode stays close to the full decode" *
          kNeedsTurbo) {
  const Image src = photo_like_image(375, 500, 3, 5);
  const Bytes jpeg = jpeg_of(src);
  for (int side : {64, 128, 180}) {
    const auto [oh, ow] = short_side_size(375, 500, side);
    DecodedRegion region;
    decode_for_resize(jpeg.data(), jpeg.size(), 3, Box{0, 0, 500, 375}, oh, ow, region, "t.jpg");
    CHECK(region.denom == jpeg_reduction_for(375, 500, oh, ow));
    Image fast, full, want;
    resize_image(region.image, oh, ow, fast);
    decode_image(jpeg.data(), jpeg.size(), 3, full, "t.jpg", JpegDecoder::turbo);
    resize_short_side(full, side, want);
    REQUIRE(fast.height == want.height);
    REQUIRE(fast.width == want.width);
    const DiffStats d = diff(fast.pixels, want.pixels);
    MESSAGE("short side ", side, " from 1/", region.denom, ": mean |d| ", d.mean, ", max ", d.max);
    CHECK(d.mean <= 2.0);
  }
}

TEST_CASE("jpeg: truncated and corrupt JPEGs are one-line errors naming the image" *
          kNeedsTurbo) {
  const Bytes jpeg = jpeg_of(photo_like_image(120, 160, 3, 3));
  Image out;
  DecodedRegion region;
  // Cut short: libjpeg would pad with grey and warn; ember refuses.
  const Bytes cut(jpeg.begin(), jpeg.begin() + std::ptrdiff_t(jpeg.size() * 6 / 10));
  std::string msg = error_of([&] { decode_image(cut.data(), cut.size(), 3, out, "photos/a.jpg"); });
  CHECK_MESSAGE(contains(msg, "photos/a.jpg: not a decodable image (libjpeg-turbo: Premature end of JPEG file)"), msg);
  msg = error_of([&] { decode_for_resize(cut.data(), cut.size(), 3, Box{0, 0, 160, 120}, 40, 40, region, "b.jpg"); });
  CHECK_MESSAGE(contains(msg, "b.jpg: not a decodable image (libjpeg-turbo: "), msg);
  // A marker in the middle of the entropy-coded data.
  Bytes marker = jpeg;
  const size_t mid = jpeg.size() * 7 / 10;
  marker[mid] = 0xFF, marker[mid + 1] = 0xD9;
  msg = error_of([&] { decode_image(marker.data(), marker.size(), 3, out, "c.jpg"); });
  CHECK_MESSAGE(contains(msg, "c.jpg: not a decodable image (libjpeg-turbo: "), msg);
  // A broken header: a frame of height 0.
  Bytes header = jpeg;
  size_t sof = 2;
  while (sof + 1 < header.size() && !(header[sof] == 0xFF && header[sof + 1] == 0xC0)) ++sof;
  REQUIRE(sof + 6 < header.size());
  header[sof + 5] = 0, header[sof + 6] = 0;
  msg = error_of([&] { probe_image(header.data(), header.size(), "d.jpg"); });
  CHECK_MESSAGE(contains(msg, "d.jpg: not a decodable image ("), msg);
  // No line breaks: one line each.
  CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("jpeg: the encoder round-trips, drops alpha, and its files decode with both decoders" *
          kNeedsTurbo) {
  const Image src = photo_like_image(90, 120, 3, 21);
  const Bytes jpeg = jpeg_of(src, 95);
  Image back;
  decode_image(jpeg.data(), jpeg.size(), 3, back, "t.jpg", JpegDecoder::turbo);
  const DiffStats d = diff(back.pixels, src.pixels);
  MESSAGE("quality 95 round trip: mean |d| ", d.mean);
  CHECK(d.mean < 4.0);
  Image with_alpha;
  with_alpha.height = 90, with_alpha.width = 120, with_alpha.channels = 4;
  for (size_t i = 0; i < src.pixels.size() / 3; ++i) {
    for (int c = 0; c < 3; ++c) with_alpha.pixels.push_back(src.pixels[i * 3 + size_t(c)]);
    with_alpha.pixels.push_back(uint8_t(i));
  }
  CHECK(jpeg_of(with_alpha, 95) == jpeg);  // alpha is dropped, nothing else changes
  Image via_stb;
  decode_image(jpeg.data(), jpeg.size(), 0, via_stb, "t.jpg", JpegDecoder::stb);
  CHECK(via_stb.channels == 3);
  CHECK(diff(via_stb.pixels, back.pixels).mean < 1.0);
}

#if EMBER_JPEG_TURBO
namespace {
// A CMYK JPEG written with libjpeg directly (Adobe-style, no transform).
Bytes cmyk_jpeg(int h, int w) {
  jpeg_compress_struct info;
  jpeg_error_mgr err;
  info.err = jpeg_std_error(&err);
  jpeg_create_compress(&info);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buf, &size);
  info.image_width = JDIMENSION(w), info.image_height = JDIMENSION(h);
  info.input_components = 4;
  info.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  jpeg_start_compress(&info, TRUE);
  std::vector<uint8_t> row(size_t(w) * 4);
  while (info.next_scanline < info.image_height) {
    for (int x = 0; x < w; ++x) {
      row[size_t(x) * 4 + 0] = uint8_t(x * 255 / w), row[size_t(x) * 4 + 1] = 40;
      row[size_t(x) * 4 + 2] = uint8_t(info.next_scanline * 255 / JDIMENSION(h)), row[size_t(x) * 4 + 3] = 200;
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&info, &r, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  Bytes out(buf, buf + size);
  std::free(buf);
  return out;
}
}  // namespace

TEST_CASE("jpeg: CMYK JPEGs, which libjpeg-turbo does not convert, decode through stb_image") {
  const Bytes jpeg = cmyk_jpeg(40, 64);
  JpegHeader header;
  REQUIRE(read_jpeg_header(jpeg.data(), jpeg.size(), header));
  CHECK(header.components == 4);
  CHECK_FALSE(header.convertible);
  Image a, b;
  decode_image(jpeg.data(), jpeg.size(), 3, a, "cmyk.jpg");
  decode_image(jpeg.data(), jpeg.size(), 3, b, "cmyk.jpg", JpegDecoder::stb);
  CHECK(a.pixels == b.pixels);
  CHECK(a.height == 40);
  DecodedRegion region;
  decode_for_resize(jpeg.data(), jpeg.size(), 3, Box{8, 8, 32, 24}, 4, 4, region, "cmyk.jpg");
  CHECK(region.denom == 1);
  CHECK(region.image.pixels == a.pixels);  // whole, through stb_image
}
#endif
