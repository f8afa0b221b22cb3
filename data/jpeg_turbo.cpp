// data/jpeg_turbo.cpp — libjpeg-turbo behind data/jpeg_turbo.h.
//
// libjpeg reports errors by calling error_exit, which must not return. Here
// it longjmps back to the setjmp in decode_steps / header_steps /
// encode_steps. Those functions create no C++ object with a destructor after
// their setjmp (everything they own lives in the caller's Decoder/Encoder,
// whose destructor frees libjpeg's state), so the jump skips nothing; the
// caller turns the saved message into an ember::Error.
#include "data/jpeg_turbo.h"

#include "data/image.h"
#include "engine/error.h"

#if EMBER_JPEG_TURBO
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <cstdlib>
#include <cstring>

#include <jerror.h>
#include <jpeglib.h>
#endif

namespace ember::data {

#if EMBER_JPEG_TURBO
namespace {

// Progressive JPEGs with thousands of tiny scans take seconds to decode a
// few bytes each (a known decompression bomb); real ones have about 10.
constexpr int kMaxScans = 256;
constexpr uint64_t kMaxPixels = uint64_t(1) << 30;  // as decode_image's stb path

struct ErrorState {
  jpeg_error_mgr mgr;  // first: libjpeg hands back a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void jump_with_message(j_common_ptr c) {
  auto* e = reinterpret_cast<ErrorState*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings after which the pixels are garbage: the file ends early, or its
// entropy-coded data is corrupt. The others (extraneous bytes before a
// marker, an unknown JFIF revision or Adobe transform code, a bad ICC marker,
// an odd progression order) leave a valid picture.
bool warning_is_fatal(int code) {
  switch (code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
      return true;
    default:
      return false;
  }
}

void on_error_exit(j_common_ptr c) { jump_with_message(c); }

void on_emit_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  if (warning_is_fatal(c->err->msg_code)) jump_with_message(c);
  c->err->num_warnings++;
}

void on_output_message(j_common_ptr) {}

void on_progress(j_common_ptr c) {
  if (!c->is_decompressor) return;
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxScans) {
    auto* e = reinterpret_cast<ErrorState*>(c->err);
    std::snprintf(e->message, sizeof e->message, "more than %d progressive scans", kMaxScans);
    std::longjmp(e->jump, 1);
  }
}

void install_errors(ErrorState& e) {
  jpeg_std_error(&e.mgr);
  e.mgr.error_exit = on_error_exit;
  e.mgr.emit_message = on_emit_message;
  e.mgr.output_message = on_output_message;
}

struct Decoder {
  jpeg_decompress_struct info{};
  ErrorState err;
  jpeg_progress_mgr progress{};
  bool created = false;
  Decoder() {
    install_errors(err);
    info.err = &err.mgr;
    progress.progress_monitor = on_progress;
  }
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&info);
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;
};

bool convertible(const jpeg_decompress_struct& info) {
  return (info.jpeg_color_space == JCS_GRAYSCALE && info.num_components == 1) ||
         ((info.jpeg_color_space == JCS_YCbCr || info.jpeg_color_space == JCS_RGB) && info.num_components == 3);
}

// Reads the header into d.info; false (message in d.err) on libjpeg errors.
bool header_steps(Decoder& d, const uint8_t* bytes, size_t n) {
  if (setjmp(d.err.jump)) return false;
  jpeg_create_decompress(&d.info);
  d.created = true;
  d.info.progress = &d.progress;
  jpeg_mem_src(&d.info, bytes, static_cast<unsigned long>(n));
  jpeg_read_header(&d.info, TRUE);
  return true;
}

struct DecodeResult {
  int x0 = 0, y0 = 0, scaled_h = 0, scaled_w = 0;
  bool too_large = false, not_convertible = false;
};

// Decodes the region into out after header_steps; false (message in d.err)
// on libjpeg errors.
bool decode_steps(Decoder& d, int channels, const JpegRegion& region, Image& out, DecodeResult& r) {
  if (setjmp(d.err.jump)) return false;
  jpeg_decompress_struct& info = d.info;
  if (uint64_t(info.image_width) * uint64_t(info.image_height) > kMaxPixels) {
    r.too_large = true;
    return true;
  }
  if (!convertible(info)) {
    r.not_convertible = true;
    return true;
  }
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  info.scale_num = 1;
  info.scale_denom = static_cast<unsigned>(region.denom);
  jpeg_start_decompress(&info);
  const int H = int(info.output_height), W = int(info.output_width);
  r.scaled_h = H, r.scaled_w = W;
  int x0 = 0, x1 = W, y0 = 0, y1 = H;
  if (region.x1 > 0) {
    x0 = region.x0 < 0 ? 0 : (region.x0 > W - 1 ? W - 1 : region.x0);
    x1 = region.x1 > W ? W : (region.x1 < x0 + 1 ? x0 + 1 : region.x1);
    y0 = region.y0 < 0 ? 0 : (region.y0 > H - 1 ? H - 1 : region.y0);
    y1 = region.y1 > H ? H : (region.y1 < y0 + 1 ? y0 + 1 : region.y1);
  }
  if (x0 > 0 || x1 < W) {
    JDIMENSION xoffset = JDIMENSION(x0), width = JDIMENSION(x1 - x0);
    jpeg_crop_scanline(&info, &xoffset, &width);  // widened to iMCU boundaries
    r.x0 = int(xoffset);
  }
  if (y0 > 0) jpeg_skip_scanlines(&info, JDIMENSION(y0));
  r.y0 = y0;
  const size_t stride = size_t(info.output_width) * size_t(channels);
  out.height = y1 - y0, out.width = int(info.output_width), out.channels = channels;
  out.pixels.resize(size_t(out.height) * stride);
  while (int(info.output_scanline) < y1) {
    JSAMPROW row = out.pixels.data() + size_t(int(info.output_scanline) - y0) * stride;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_abort_decompress(&info);  // the rows below the region are not needed
  return true;
}

struct Encoder {
  jpeg_compress_struct info{};
  ErrorState err;
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  bool created = false;
  Encoder() {
    install_errors(err);
    info.err = &err.mgr;
  }
  ~Encoder() {
    if (created) jpeg_destroy_compress(&info);
    std::free(buffer);  // jpeg_mem_dest's buffer is malloc'd
  }
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;
};

bool encode_steps(Encoder& e, const Image& img, int quality) {
  if (setjmp(e.err.jump)) return false;
  jpeg_create_compress(&e.info);
  e.created = true;
  jpeg_mem_dest(&e.info, &e.buffer, &e.size);
  e.info.image_width = JDIMENSION(img.width);
  e.info.image_height = JDIMENSION(img.height);
  e.info.input_components = img.channels;
  e.info.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&e.info);
  jpeg_set_quality(&e.info, quality, TRUE);
  jpeg_start_compress(&e.info, TRUE);
  const size_t stride = size_t(img.width) * size_t(img.channels);
  while (e.info.next_scanline < e.info.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(img.pixels.data() + size_t(e.info.next_scanline) * stride);
    jpeg_write_scanlines(&e.info, &row, 1);
  }
  jpeg_finish_compress(&e.info);
  return true;
}

}  // namespace

bool jpeg_turbo_built() { return true; }

bool read_jpeg_header(const uint8_t* bytes, size_t n, JpegHeader& header) {
  if (n == 0 || n > (size_t(1) << 40)) return false;
  Decoder d;
  if (!header_steps(d, bytes, n)) return false;
  header.height = int(d.info.image_height);
  header.width = int(d.info.image_width);
  header.components = d.info.num_components;
  header.convertible = convertible(d.info);
  return true;
}

void decode_jpeg_turbo(const uint8_t* bytes, size_t n, int channels, const JpegRegion& region, Image& out, int* out_x0,
                       int* out_y0, int* scaled_h, int* scaled_w, const std::string& what) {
  EMBER_CHECK(channels == 1 || channels == 3, what, ": cannot decode to ", channels, " channels (1 or 3)");
  EMBER_CHECK(region.denom == 1 || region.denom == 2 || region.denom == 4 || region.denom == 8, what,
              ": JPEG scale 1/", region.denom, " is not 1/1, 1/2, 1/4 or 1/8");
  EMBER_CHECK(n > 0, what, ": not a decodable image (empty)");
  Decoder d;
  DecodeResult r;
  if (!header_steps(d, bytes, n) || !decode_steps(d, channels, region, out, r))
    fail(cat(what, ": not a decodable image (libjpeg-turbo: ", d.err.message, ")"));
  EMBER_CHECK(!r.too_large, what, ": not a decodable image (", d.info.image_width, "x", d.info.image_height,
              " pixels is too large)");
  EMBER_CHECK(!r.not_convertible, what, ": JPEG with ", d.info.num_components,
              " components in colour space ", int(d.info.jpeg_color_space), " cannot be converted to RGB or grey");
  *out_x0 = r.x0, *out_y0 = r.y0, *scaled_h = r.scaled_h, *scaled_w = r.scaled_w;
}

void encode_jpeg_turbo(const Image& img, int quality, std::vector<uint8_t>& out) {
  EMBER_CHECK(img.channels == 1 || img.channels == 3, "encode_jpeg: ", img.channels,
              " channels (libjpeg-turbo takes 1 or 3)");
  Encoder e;
  if (!encode_steps(e, img, quality))
    fail(cat("encode_jpeg: libjpeg-turbo failed on a ", img.width, "x", img.height, "x", img.channels, " image (",
             e.err.message, ")"));
  out.assign(e.buffer, e.buffer + e.size);
}

#else  // JPEG=stb: no libjpeg-turbo in this build

bool jpeg_turbo_built() { return false; }
bool read_jpeg_header(const uint8_t*, size_t, JpegHeader&) { return false; }
void decode_jpeg_turbo(const uint8_t*, size_t, int, const JpegRegion&, Image&, int*, int*, int*, int*,
                       const std::string& what) {
  fail(cat(what, ": this build has no libjpeg-turbo (JPEG=stb)"));
}
void encode_jpeg_turbo(const Image&, int, std::vector<uint8_t>&) {
  fail("encode_jpeg: this build has no libjpeg-turbo (JPEG=stb)");
}

#endif

}  // namespace ember::data
