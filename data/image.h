// data/image.h — decoding, resizing and encoding images on the CPU, for
// im2rec (decode to check, resize the short side, re-encode) and the loader
// (decode, crop, resize, flip into the batch). JPEGs decode and encode with
// libjpeg-turbo where the build has it (JPEG=turbo, data/jpeg_turbo.h: at a
// reduced DCT scale and only the part a crop needs, when asked), everything
// else (and JPEGs in JPEG=stb builds, or CMYK ones) with stb_image and
// stb_image_write (Debian's libstb-dev); resizing is ember's own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/record_format.h"

namespace ember::data {

// 8-bit pixels, interleaved: pixels[(y * width + x) * channels + c].
struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;
};

// The encoding of an encoded image, from its first bytes (JPEG, PNG, or
// other stb_image formats); Encoding::other when unknown.
Encoding sniff_encoding(const uint8_t* bytes, size_t n);

// Decodes JPEG/PNG/BMP/GIF/TGA/... to `channels` (1 = grey, 3 = RGB; 0 =
// as stored, 1 or 3). Errors (ember::Error) start with `what` and give
// stb_image's reason ("photos/cat/3.jpg: not a decodable image (bad Huffman code)").
void decode_image(const uint8_t* bytes, size_t n, int channels, Image& out, const std::string& what);

// Region of an image, in pixels.
struct Box {
  int x = 0, y = 0, width = 0, height = 0;
};

// The codec JPEGs go to (decode and encode): libjpeg-turbo in builds that
// have it, stb_image / stb_image_write otherwise. The environment variable
// EMBER_JPEG=stb picks stb in a turbo build (side-by-side timing);
// EMBER_JPEG=turbo insists on libjpeg-turbo.
enum class JpegDecoder { stb, turbo };
JpegDecoder jpeg_decoder();
const char* jpeg_decoder_name(JpegDecoder d);
// decode_image with a chosen JPEG decoder (tests, bench_decode); turbo
// needs a build with libjpeg-turbo.
void decode_image(const uint8_t* bytes, size_t n, int channels, Image& out, const std::string& what,
                  JpegDecoder decoder);

// An encoded image's size and encoding from its header, without decoding it.
// Errors as decode_image's.
struct ImageInfo {
  int height = 0, width = 0;
  Encoding encoding = Encoding::other;
};
ImageInfo probe_image(const uint8_t* bytes, size_t n, const std::string& what);

// An image decoded in part, maybe reduced: pixel (x, y) of `image` is pixel
// (x0 + x, y0 + y) of the picture reduced by `denom` (1, 2, 4 or 8), which
// is scaled_height x scaled_width (the full size divided by denom, rounded up).
struct DecodedRegion {
  Image image;
  int denom = 1, x0 = 0, y0 = 0;
  int scaled_height = 0, scaled_width = 0;
  int full_height = 0, full_width = 0;
};

// The largest reduction 1/d, d in {1, 2, 4, 8}, at which a box_h x box_w box
// still has at least out_h x out_w pixels (PIL's draft() rule): decoding at
// that scale never leaves the resize fewer pixels than it outputs.
int jpeg_reduction_for(int box_h, int box_w, int out_h, int out_w);

// Decodes what resizing `box` (full-size pixels) of an encoded image to
// out_h x out_w needs: with libjpeg-turbo, a JPEG at jpeg_reduction_for's
// scale and only the iMCU rows and columns that hold the box; any other
// image (or decoder) whole, at denom 1. The box must lie inside the image.
void decode_for_resize(const uint8_t* bytes, size_t n, int channels, const Box& box, int out_h, int out_w,
                       DecodedRegion& out, const std::string& what);

// resize_to_planar of `box`, given in full-size pixels, of a decoded region:
// the box maps to the reduced image as x / denom, keeping its fractions, and
// samples clamp to the reduced pixels it touches. With denom 1 and the whole
// image decoded this is resize_to_planar exactly.
void resize_region_to_planar(const DecodedRegion& src, const Box& box, int out_h, int out_w, bool flip,
                             uint8_t* dst);

// Resizes the box of src to out_h x out_w with bilinear interpolation
// (pixel centres aligned, as OpenCV's INTER_LINEAR / PyTorch's
// align_corners=False) and writes it planar: dst[c * out_h * out_w + y * out_w + x],
// mirrored left-right when flip. dst holds src.channels planes.
void resize_to_planar(const Image& src, const Box& box, int out_h, int out_w, bool flip, uint8_t* dst);

// Resizes the whole image so its shorter side is `short_side` (keeping the
// aspect ratio; area averaging when shrinking, so it does not alias), HWC.
void resize_short_side(const Image& src, int short_side, Image& out);
// The size resize_short_side gives a height x width image: {out_h, out_w}.
std::pair<int, int> short_side_size(int height, int width, int short_side);
// Resizes the whole image to out_h x out_w, HWC: area averaging when neither
// side grows, bilinear otherwise (resize_short_side's rule).
void resize_image(const Image& src, int out_h, int out_w, Image& out);

// Encoders; quality 1..100 for JPEG (libjpeg-turbo where built: 4:2:0
// chroma; stb_image_write otherwise). A 2- or 4-channel image's alpha is dropped.
void encode_jpeg(const Image& img, int quality, std::vector<uint8_t>& out);
void encode_png(const Image& img, std::vector<uint8_t>& out);

}  // namespace ember::data
