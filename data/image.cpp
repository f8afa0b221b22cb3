// data/image.cpp — decode (libjpeg-turbo for JPEGs where built, stb_image),
// resize (ember's own) and encode (libjpeg-turbo / stb_image_write) 8-bit images.
//
// Bilinear resize (resize_to_planar and enlarging in resize_short_side) is
// separable fixed point, the scheme of OpenCV's INTER_LINEAR: for output
// column x of a box of width W resized to w,
//     f  = (x + 0.5) * W / w - 0.5,  i = floor(f), t = f - i,
//     clamped to the box: i < 0 -> (0, t = 0); i >= W - 1 -> (W - 1, t = 0),
//     (a box with fractional edges, resize_region_to_planar, clamps to the
//     pixels it touches),
//     weights (2048 - a, a) with a = round(t * 2048) on columns (i, min(i + 1, W - 1));
// rows likewise. A horizontal pass makes 19-bit row values
// h = p0 * (2048 - a) + p1 * a, the vertical pass combines two of them with the
// row weights and rounds: (h0 * (2048 - b) + h1 * b + 2^21) >> 22. Only the
// box's pixels are read (the same as cropping first, then resizing). The
// column tables are computed once per call, source rows are converted once
// and reused by consecutive output rows, and the vertical pass is a plain
// loop over int32 that the compiler vectorises.
#include "data/image.h"

#include <stb/stb_image.h>
#include <stb/stb_image_write.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "data/jpeg_turbo.h"
#include "engine/error.h"

namespace ember::data {
namespace {

constexpr int kWeightBits = 11;
constexpr int kOne = 1 << kWeightBits;  // 2048

// stb_image's reason for the last failure, made printable: some reasons
// quote input bytes (an unknown PNG chunk's type), which could break the
// one-line message with a newline or a control character.
std::string stb_reason() {
  const char* r = stbi_failure_reason();
  std::string s = r ? r : "unknown reason";
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return s;
}

// stb_image reserves a PNG chunk's declared length before it reads the
// chunk, so a few bytes declaring a 2 GB IDAT made it allocate 2 GB before
// failing. Every chunk up to IEND must lie inside the data: checked first.
void check_png_chunks(const uint8_t* b, size_t n, const std::string& what) {
  size_t pos = 8;  // after the signature
  while (n - pos >= 8) {
    const uint32_t length = uint32_t(b[pos]) << 24 | uint32_t(b[pos + 1]) << 16 | uint32_t(b[pos + 2]) << 8 | b[pos + 3];
    if (std::memcmp(b + pos + 4, "IEND", 4) == 0) return;
    if (length > n - pos - 8) {
      char type[5] = {};
      for (int k = 0; k < 4; ++k) type[k] = b[pos + 4 + k] >= 0x20 && b[pos + 4 + k] < 0x7f ? char(b[pos + 4 + k]) : '?';
      fail(cat(what, ": not a decodable image (PNG chunk '", type, "' at byte ", pos, " declares ", length,
               " bytes, past the end of the ", n, " bytes)"));
    }
    pos += size_t(length) + 12;
    if (pos > n) return;  // a missing final CRC: stb_image decides
  }
}

// ------------------------------------------------------------ bilinear axes

// Source positions and weights of one axis (see the file comment).
struct LinearAxis {
  std::vector<int> i0, i1;  // source indices (absolute, inside the box)
  std::vector<int> w1;      // weight of i1 in 1/2048; i0 gets 2048 - w1
};

// One axis of a sampling box: it starts at `start` and is `length` pixels
// long (fractions allowed); samples clamp to the pixels [lo, hi].
struct AxisSpan {
  double start, length;
  int lo, hi;
};

AxisSpan whole_pixels(int start, int length) { return {double(start), double(length), start, start + length - 1}; }

void make_linear_axis(const AxisSpan& span, int out_len, LinearAxis& a) {
  a.i0.resize(size_t(out_len));
  a.i1.resize(size_t(out_len));
  a.w1.resize(size_t(out_len));
  const double scale = span.length / double(out_len);
  for (int o = 0; o < out_len; ++o) {
    const double f = span.start + (o + 0.5) * scale - 0.5;
    int i = int(std::floor(f));
    double t = f - i;
    if (i < span.lo) i = span.lo, t = 0;
    if (i >= span.hi) i = span.hi, t = 0;
    a.i0[size_t(o)] = i;
    a.i1[size_t(o)] = std::min(i + 1, span.hi);
    a.w1[size_t(o)] = int(std::lround(t * kOne));
  }
}

// Horizontal pass of one source row into planar int32 rows h[c * out_w + x].
// off0/off1 are byte offsets of the two source pixels in the row.
template <int C>
void horizontal(const uint8_t* row, const int* off0, const int* off1, const int* w1, int out_w, int32_t* h) {
  for (int x = 0; x < out_w; ++x) {
    const uint8_t* a = row + off0[x];
    const uint8_t* b = row + off1[x];
    const int32_t wb = w1[x], wa = kOne - wb;
    for (int c = 0; c < C; ++c) h[c * out_w + x] = int32_t(a[c]) * wa + int32_t(b[c]) * wb;
  }
}

void horizontal_any(const uint8_t* row, const int* off0, const int* off1, const int* w1, int out_w, int channels,
                    int32_t* h) {
  for (int x = 0; x < out_w; ++x) {
    const uint8_t* a = row + off0[x];
    const uint8_t* b = row + off1[x];
    const int32_t wb = w1[x], wa = kOne - wb;
    for (int c = 0; c < channels; ++c) h[c * out_w + x] = int32_t(a[c]) * wa + int32_t(b[c]) * wb;
  }
}

// Vertical pass: n values from two horizontal rows.
inline void vertical(const int32_t* __restrict h0, const int32_t* __restrict h1, int32_t wb, int n,
                     uint8_t* __restrict out) {
  const int32_t wa = kOne - wb;
  constexpr int32_t round = 1 << (2 * kWeightBits - 1);
  for (int i = 0; i < n; ++i) out[i] = uint8_t((h0[i] * wa + h1[i] * wb + round) >> (2 * kWeightBits));
}

void check_box(const Image& src, const Box& box, int out_h, int out_w, const char* fn) {
  EMBER_CHECK(src.channels >= 1 && src.channels <= 4 && src.height > 0 && src.width > 0 &&
                  src.pixels.size() == size_t(src.height) * size_t(src.width) * size_t(src.channels),
              fn, ": bad source image ", src.height, "x", src.width, "x", src.channels);
  EMBER_CHECK(box.width > 0 && box.height > 0 && box.x >= 0 && box.y >= 0 && box.x <= src.width - box.width &&
                  box.y <= src.height - box.height,
              fn, ": box (x ", box.x, ", y ", box.y, ", ", box.width, "x", box.height, ") is not inside the ",
              src.width, "x", src.height, " image");
  EMBER_CHECK(out_h > 0 && out_w > 0, fn, ": output size ", out_h, "x", out_w, " must be positive");
}

// Bilinear resize of the box (x, y spans) to out_h x out_w; planar or interleaved output.
void bilinear(const Image& src, const AxisSpan& xs, const AxisSpan& ys, int out_h, int out_w, bool flip, bool planar,
              uint8_t* dst) {
  const int C = src.channels;
  LinearAxis ax, ay;
  make_linear_axis(xs, out_w, ax);
  make_linear_axis(ys, out_h, ay);
  if (flip) {
    std::reverse(ax.i0.begin(), ax.i0.end());
    std::reverse(ax.i1.begin(), ax.i1.end());
    std::reverse(ax.w1.begin(), ax.w1.end());
  }
  for (int x = 0; x < out_w; ++x) ax.i0[size_t(x)] *= C, ax.i1[size_t(x)] *= C;  // byte offsets in a row

  const size_t plane_row = size_t(out_w);
  std::vector<int32_t> buf(2 * size_t(C) * plane_row);
  int32_t* rows[2] = {buf.data(), buf.data() + size_t(C) * plane_row};
  int tags[2] = {-1, -1};
  std::vector<uint8_t> line(planar ? 0 : size_t(C) * plane_row);
  const size_t src_stride = size_t(src.width) * size_t(C);

  auto make_row = [&](int sy, int32_t* h) {
    const uint8_t* row = src.pixels.data() + size_t(sy) * src_stride;
    switch (C) {
      case 1: horizontal<1>(row, ax.i0.data(), ax.i1.data(), ax.w1.data(), out_w, h); break;
      case 3: horizontal<3>(row, ax.i0.data(), ax.i1.data(), ax.w1.data(), out_w, h); break;
      default: horizontal_any(row, ax.i0.data(), ax.i1.data(), ax.w1.data(), out_w, C, h); break;
    }
  };
  // Makes rows[slot] hold source row sy, reusing either cached row.
  auto ensure = [&](int slot, int sy) {
    if (tags[slot] == sy) return;
    if (tags[1 - slot] == sy) {
      std::swap(rows[0], rows[1]);
      std::swap(tags[0], tags[1]);
      if (tags[slot] == sy) return;
    }
    make_row(sy, rows[slot]);
    tags[slot] = sy;
  };

  const size_t plane = size_t(out_h) * plane_row;
  for (int y = 0; y < out_h; ++y) {
    const int wb = ay.w1[size_t(y)];
    ensure(0, ay.i0[size_t(y)]);
    const int32_t* h0 = rows[0];
    const int32_t* h1 = h0;
    if (wb != 0) {
      ensure(1, ay.i1[size_t(y)]);
      h0 = rows[0];  // ensure(1) never moves slot 0's row away (it differs from row i1)
      h1 = rows[1];
    }
    if (planar) {
      for (int c = 0; c < C; ++c)
        vertical(h0 + size_t(c) * plane_row, h1 + size_t(c) * plane_row, wb, out_w,
                 dst + size_t(c) * plane + size_t(y) * plane_row);
    } else {
      for (int c = 0; c < C; ++c)
        vertical(h0 + size_t(c) * plane_row, h1 + size_t(c) * plane_row, wb, out_w, line.data() + size_t(c) * plane_row);
      uint8_t* out = dst + size_t(y) * plane_row * size_t(C);
      for (int x = 0; x < out_w; ++x)
        for (int c = 0; c < C; ++c) out[size_t(x) * size_t(C) + size_t(c)] = line[size_t(c) * plane_row + size_t(x)];
    }
  }
}

// ------------------------------------------------------------ area averaging

// For each output index: the source indices it covers and their weights
// (overlap of [o * s, (o + 1) * s) with each source pixel, divided by s).
struct AreaAxis {
  std::vector<int> first, count;
  std::vector<float> weight;   // concatenated, count[o] per output
  std::vector<size_t> offset;  // into weight
};

void make_area_axis(int src_len, int out_len, AreaAxis& a) {
  const double scale = double(src_len) / double(out_len);
  a.first.resize(size_t(out_len));
  a.count.resize(size_t(out_len));
  a.offset.resize(size_t(out_len));
  a.weight.clear();
  for (int o = 0; o < out_len; ++o) {
    const double lo = o * scale, hi = std::min(double(src_len), (o + 1) * scale);
    int i = std::min(src_len - 1, int(std::floor(lo)));
    a.offset[size_t(o)] = a.weight.size();
    int first = -1, n = 0;
    for (; i < src_len && i < hi; ++i) {
      const double overlap = std::min(hi, double(i + 1)) - std::max(lo, double(i));
      if (overlap <= 1e-9) continue;
      if (first < 0) first = i;
      a.weight.push_back(float(overlap / scale));
      ++n;
    }
    a.first[size_t(o)] = first < 0 ? std::min(src_len - 1, int(lo)) : first;
    if (n == 0) a.weight.push_back(1.0f), n = 1;
    a.count[size_t(o)] = n;
  }
}

void area_resize(const Image& src, int out_h, int out_w, Image& out) {
  const int C = src.channels;
  AreaAxis ax, ay;
  make_area_axis(src.width, out_w, ax);
  make_area_axis(src.height, out_h, ay);
  const size_t n = size_t(out_w) * size_t(C);
  std::vector<float> hrow(n), acc(n);
  int cached = -1;
  const size_t src_stride = size_t(src.width) * size_t(C);
  out.height = out_h, out.width = out_w, out.channels = C;
  out.pixels.resize(size_t(out_h) * n);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int k = 0; k < ay.count[size_t(y)]; ++k) {
      const int sy = ay.first[size_t(y)] + k;
      if (sy != cached) {
        const uint8_t* row = src.pixels.data() + size_t(sy) * src_stride;
        for (int x = 0; x < out_w; ++x) {
          float s[4] = {0, 0, 0, 0};
          const float* w = ax.weight.data() + ax.offset[size_t(x)];
          const uint8_t* p = row + size_t(ax.first[size_t(x)]) * size_t(C);
          for (int j = 0; j < ax.count[size_t(x)]; ++j, p += C)
            for (int c = 0; c < C; ++c) s[c] += w[j] * float(p[c]);
          for (int c = 0; c < C; ++c) hrow[size_t(x) * size_t(C) + size_t(c)] = s[c];
        }
        cached = sy;
      }
      const float wy = ay.weight[ay.offset[size_t(y)] + size_t(k)];
      for (size_t i = 0; i < n; ++i) acc[i] += wy * hrow[i];
    }
    uint8_t* dst = out.pixels.data() + size_t(y) * n;
    for (size_t i = 0; i < n; ++i) dst[i] = uint8_t(std::clamp(int(acc[i] + 0.5f), 0, 255));
  }
}

void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  const auto* p = static_cast<const uint8_t*>(data);
  out->insert(out->end(), p, p + size);
}

void check_encodable(const Image& img, const char* fn) {
  EMBER_CHECK(img.height > 0 && img.width > 0 && img.channels >= 1 && img.channels <= 4 &&
                  img.pixels.size() == size_t(img.height) * size_t(img.width) * size_t(img.channels),
              fn, ": bad image ", img.height, "x", img.width, "x", img.channels, " with ", img.pixels.size(),
              " bytes");
}

}  // namespace

Encoding sniff_encoding(const uint8_t* bytes, size_t n) {
  static const uint8_t png[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return Encoding::jpeg;
  if (n >= 8 && std::memcmp(bytes, png, 8) == 0) return Encoding::png;
  return Encoding::other;  // BMP, GIF, TGA, PNM, ... or not an image at all (decode_image tells)
}

namespace {

// No valid file holds more pixels per byte than its coding allows: a JPEG
// needs at least one bit per 8x8 block (<= 512 pixels a byte), a GIF's LZW
// codes <= 4096 pixels per 12 bits, BMP/TGA/PNM RLE less. stb_image decodes
// missing data as zeros, so a 700-byte JPEG header declaring 65518x760 made
// it decode 50 Mpixels (seconds, 150 MB); libjpeg-turbo stops at the end of
// the data, but the check costs nothing there either. PNG is exempt: stb
// checks its inflated size against the dimensions before decoding.
void check_pixels_per_byte(uint64_t w, uint64_t h, size_t n, Encoding enc, const std::string& what) {
  if (enc == Encoding::png) return;
  const uint64_t per_byte = enc == Encoding::jpeg ? 1024 : 4096;
  EMBER_CHECK(w * h <= std::max<uint64_t>(uint64_t(n) * per_byte, 4096), what, ": not a decodable image (", w, "x", h,
              " pixels cannot be coded in ", n, " bytes)");
}

// stb_image's decode of any format it knows (JPEG too: JPEG=stb builds,
// EMBER_JPEG=stb, and CMYK JPEGs, which libjpeg-turbo does not convert).
void decode_stb(const uint8_t* bytes, size_t n, int channels, Image& out, const std::string& what) {
  if (sniff_encoding(bytes, n) == Encoding::png) check_png_chunks(bytes, n, what);
  int w = 0, h = 0, stored = 0;
  if (!stbi_info_from_memory(bytes, int(n), &w, &h, &stored))
    fail(cat(what, ": not a decodable image (", stb_reason(), ")"));
  const int want = channels != 0 ? channels : (stored <= 2 ? 1 : 3);
  EMBER_CHECK(w > 0 && h > 0 && uint64_t(w) * uint64_t(h) <= (uint64_t(1) << 30), what,
              ": not a decodable image (", w, "x", h, " pixels is too large)");
  check_pixels_per_byte(uint64_t(w), uint64_t(h), n, sniff_encoding(bytes, n), what);
  int w2 = 0, h2 = 0, c2 = 0;
  stbi_uc* p = stbi_load_from_memory(bytes, int(n), &w2, &h2, &c2, want);
  if (!p) fail(cat(what, ": not a decodable image (", stb_reason(), ")"));
  out.height = h2, out.width = w2, out.channels = want;
  const size_t size = size_t(h2) * size_t(w2) * size_t(want);
  out.pixels.assign(p, p + size);
  stbi_image_free(p);
}

void check_decodable(size_t n, int channels, const std::string& what) {
  EMBER_CHECK(channels == 0 || channels == 1 || channels == 3, what, ": cannot decode to ", channels,
              " channels (1 or 3)");
  EMBER_CHECK(n > 0, what, ": not a decodable image (empty)");
  EMBER_CHECK(n <= size_t(INT_MAX), what, ": not a decodable image (", n, " bytes is too large)");
}

// Whether libjpeg-turbo takes these bytes: a JPEG, this decoder chosen, and
// a colour space it converts (else stb_image does). Fills header when true.
bool use_turbo(const uint8_t* bytes, size_t n, JpegHeader& header, JpegDecoder decoder = jpeg_decoder()) {
  return decoder == JpegDecoder::turbo && sniff_encoding(bytes, n) == Encoding::jpeg &&
         read_jpeg_header(bytes, n, header) && header.convertible;
}

// A sampling span along one axis of a reduced, partial decode: full-size
// pixels [start, start + length) -> the region's coordinates.
AxisSpan reduced_span(int start, int length, int denom, int origin, int extent) {
  const double d = denom;
  const int lo = start / denom - origin;
  const int hi = (start + length + denom - 1) / denom - 1 - origin;
  return {start / d - origin, length / d, std::clamp(lo, 0, extent - 1), std::clamp(hi, 0, extent - 1)};
}

}  // namespace

JpegDecoder jpeg_decoder() {
  static const JpegDecoder chosen = [] {
    const char* env = std::getenv("EMBER_JPEG");
    const std::string v = env ? env : "";
    if (v.empty()) return jpeg_turbo_built() ? JpegDecoder::turbo : JpegDecoder::stb;
    if (v == "stb") return JpegDecoder::stb;
    EMBER_CHECK(v == "turbo", "EMBER_JPEG=", v, ": expected stb or turbo");
    EMBER_CHECK(jpeg_turbo_built(), "EMBER_JPEG=turbo, but this build has no libjpeg-turbo (built with JPEG=stb)");
    return JpegDecoder::turbo;
  }();
  return chosen;
}

const char* jpeg_decoder_name(JpegDecoder d) { return d == JpegDecoder::turbo ? "libjpeg-turbo" : "stb_image"; }

void decode_image(const uint8_t* bytes, size_t n, int channels, Image& out, const std::string& what) {
  decode_image(bytes, n, channels, out, what, jpeg_decoder());
}

void decode_image(const uint8_t* bytes, size_t n, int channels, Image& out, const std::string& what,
                  JpegDecoder decoder) {
  check_decodable(n, channels, what);
  EMBER_CHECK(decoder == JpegDecoder::stb || jpeg_turbo_built(), what,
              ": libjpeg-turbo asked for, but this build has none (JPEG=stb)");
  JpegHeader header;
  if (!use_turbo(bytes, n, header, decoder)) return decode_stb(bytes, n, channels, out, what);
  check_pixels_per_byte(uint64_t(header.width), uint64_t(header.height), n, Encoding::jpeg, what);
  const int want = channels != 0 ? channels : (header.components == 1 ? 1 : 3);
  int x0, y0, sh, sw;
  decode_jpeg_turbo(bytes, n, want, JpegRegion{}, out, &x0, &y0, &sh, &sw, what);
}

ImageInfo probe_image(const uint8_t* bytes, size_t n, const std::string& what) {
  check_decodable(n, 0, what);
  ImageInfo info;
  info.encoding = sniff_encoding(bytes, n);
  JpegHeader header;
  if (use_turbo(bytes, n, header)) {
    info.height = header.height, info.width = header.width;
  } else {
    int stored = 0;
    if (!stbi_info_from_memory(bytes, int(n), &info.width, &info.height, &stored))
      fail(cat(what, ": not a decodable image (", stb_reason(), ")"));
  }
  EMBER_CHECK(info.width > 0 && info.height > 0 && uint64_t(info.width) * uint64_t(info.height) <= (uint64_t(1) << 30),
              what, ": not a decodable image (", info.width, "x", info.height, " pixels is too large)");
  check_pixels_per_byte(uint64_t(info.width), uint64_t(info.height), n, info.encoding, what);
  return info;
}

int jpeg_reduction_for(int box_h, int box_w, int out_h, int out_w) {
  for (int d = 8; d > 1; d /= 2)
    if (int64_t(box_h) >= int64_t(out_h) * d && int64_t(box_w) >= int64_t(out_w) * d) return d;
  return 1;
}

void decode_for_resize(const uint8_t* bytes, size_t n, int channels, const Box& box, int out_h, int out_w,
                       DecodedRegion& out, const std::string& what) {
  check_decodable(n, channels, what);
  EMBER_CHECK(out_h > 0 && out_w > 0, what, ": output size ", out_h, "x", out_w, " must be positive");
  JpegHeader header;
  if (!use_turbo(bytes, n, header)) {
    decode_stb(bytes, n, channels, out.image, what);
    out.denom = 1, out.x0 = 0, out.y0 = 0;
    out.scaled_height = out.full_height = out.image.height;
    out.scaled_width = out.full_width = out.image.width;
    return;
  }
  EMBER_CHECK(box.width > 0 && box.height > 0 && box.x >= 0 && box.y >= 0 && box.x <= header.width - box.width &&
                  box.y <= header.height - box.height,
              what, ": crop box (x ", box.x, ", y ", box.y, ", ", box.width, "x", box.height, ") is not inside the ",
              header.width, "x", header.height, " image");
  check_pixels_per_byte(uint64_t(header.width), uint64_t(header.height), n, Encoding::jpeg, what);
  const int d = jpeg_reduction_for(box.height, box.width, out_h, out_w);
  JpegRegion region;
  region.denom = d;
  // One column more on each side: libjpeg's fancy chroma upsampling repeats
  // the edge sample at a crop's left and right edges, so a cropped decode's
  // first and last columns differ from the whole image's; those columns now
  // lie outside the box, and the box's pixels are the whole decode's exactly.
  region.x0 = std::max(0, box.x / d - 1), region.x1 = (box.x + box.width + d - 1) / d + 1;
  region.y0 = box.y / d, region.y1 = (box.y + box.height + d - 1) / d;
  const int want = channels != 0 ? channels : (header.components == 1 ? 1 : 3);
  decode_jpeg_turbo(bytes, n, want, region, out.image, &out.x0, &out.y0, &out.scaled_height, &out.scaled_width, what);
  out.denom = d;
  out.full_height = header.height, out.full_width = header.width;
}

void resize_region_to_planar(const DecodedRegion& src, const Box& box, int out_h, int out_w, bool flip,
                             uint8_t* dst) {
  const Image& img = src.image;
  check_box(img, Box{0, 0, img.width, img.height}, out_h, out_w, "resize_region_to_planar");
  EMBER_CHECK(src.denom == 1 || src.denom == 2 || src.denom == 4 || src.denom == 8,
              "resize_region_to_planar: reduction 1/", src.denom);
  EMBER_CHECK(box.width > 0 && box.height > 0 && box.x >= 0 && box.y >= 0 &&
                  (box.x + box.width + src.denom - 1) / src.denom <= src.x0 + img.width && box.x / src.denom >= src.x0 &&
                  (box.y + box.height + src.denom - 1) / src.denom <= src.y0 + img.height &&
                  box.y / src.denom >= src.y0,
              "resize_region_to_planar: box (x ", box.x, ", y ", box.y, ", ", box.width, "x", box.height,
              ") is not inside the decoded region");
  const AxisSpan xs = reduced_span(box.x, box.width, src.denom, src.x0, img.width);
  const AxisSpan ys = reduced_span(box.y, box.height, src.denom, src.y0, img.height);
  bilinear(img, xs, ys, out_h, out_w, flip, /*planar=*/true, dst);
}

void resize_to_planar(const Image& src, const Box& box, int out_h, int out_w, bool flip, uint8_t* dst) {
  check_box(src, box, out_h, out_w, "resize_to_planar");
  bilinear(src, whole_pixels(box.x, box.width), whole_pixels(box.y, box.height), out_h, out_w, flip,
           /*planar=*/true, dst);
}

std::pair<int, int> short_side_size(int height, int width, int short_side) {
  // MXNet's im2rec and torchvision: the long side is scaled and truncated.
  if (height <= width) return {short_side, std::max(1, int(int64_t(width) * short_side / height))};
  return {std::max(1, int(int64_t(height) * short_side / width)), short_side};
}

void resize_image(const Image& src, int out_h, int out_w, Image& out) {
  check_box(src, Box{0, 0, src.width, src.height}, out_h, out_w, "resize_image");
  EMBER_CHECK(&src != &out, "resize_image: source and output must differ");
  if (out_h == src.height && out_w == src.width) {
    out = src;
    return;
  }
  if (out_h <= src.height && out_w <= src.width) {
    area_resize(src, out_h, out_w, out);
    return;
  }
  out.height = out_h, out.width = out_w, out.channels = src.channels;
  out.pixels.resize(size_t(out_h) * size_t(out_w) * size_t(src.channels));
  bilinear(src, whole_pixels(0, src.width), whole_pixels(0, src.height), out_h, out_w, false, /*planar=*/false,
           out.pixels.data());
}

void resize_short_side(const Image& src, int short_side, Image& out) {
  check_box(src, Box{0, 0, src.width, src.height}, 1, 1, "resize_short_side");
  EMBER_CHECK(short_side > 0, "resize_short_side: short side ", short_side, " must be positive");
  EMBER_CHECK(&src != &out, "resize_short_side: source and output must differ");
  // Shrinking the short side shrinks both (area averaging), growing it grows
  // both (bilinear): resize_image's rule gives the same choice.
  const auto [out_h, out_w] = short_side_size(src.height, src.width, short_side);
  resize_image(src, out_h, out_w, out);
}

namespace {
// The image without its alpha channel (2 -> 1, 4 -> 3), for libjpeg-turbo.
Image without_alpha(const Image& img) {
  Image out;
  out.height = img.height, out.width = img.width, out.channels = img.channels - 1;
  const size_t n = size_t(img.height) * size_t(img.width);
  out.pixels.resize(n * size_t(out.channels));
  for (size_t i = 0; i < n; ++i)
    for (int c = 0; c < out.channels; ++c)
      out.pixels[i * size_t(out.channels) + size_t(c)] = img.pixels[i * size_t(img.channels) + size_t(c)];
  return out;
}
}  // namespace

void encode_jpeg(const Image& img, int quality, std::vector<uint8_t>& out) {
  check_encodable(img, "encode_jpeg");
  EMBER_CHECK(quality >= 1 && quality <= 100, "encode_jpeg: quality ", quality, " is not in 1..100");
  out.clear();
  if (jpeg_decoder() == JpegDecoder::turbo) {
    if (img.channels == 2 || img.channels == 4) return encode_jpeg_turbo(without_alpha(img), quality, out);
    return encode_jpeg_turbo(img, quality, out);
  }
  if (!stbi_write_jpg_to_func(append_bytes, &out, img.width, img.height, img.channels, img.pixels.data(), quality))
    fail(cat("encode_jpeg: stb_image_write failed on a ", img.width, "x", img.height, "x", img.channels, " image"));
}

void encode_png(const Image& img, std::vector<uint8_t>& out) {
  check_encodable(img, "encode_png");
  out.clear();
  if (!stbi_write_png_to_func(append_bytes, &out, img.width, img.height, img.channels, img.pixels.data(),
                              img.width * img.channels))
    fail(cat("encode_png: stb_image_write failed on a ", img.width, "x", img.height, "x", img.channels, " image"));
}

}  // namespace ember::data
