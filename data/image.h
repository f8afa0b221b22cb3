// data/image.h — decoding, resizing and encoding images on the CPU, for
// im2rec (decode to check, resize the short side, re-encode) and the loader
// (decode, crop, resize, flip into the batch). Decoding uses stb_image and
// encoding stb_image_write (Debian's libstb-dev); resizing is ember's own.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
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

// Resizes the box of src to out_h x out_w with bilinear interpolation
// (pixel centres aligned, as OpenCV's INTER_LINEAR / PyTorch's
// align_corners=False) and writes it planar: dst[c * out_h * out_w + y * out_w + x],
// mirrored left-right when flip. dst holds src.channels planes.
void resize_to_planar(const Image& src, const Box& box, int out_h, int out_w, bool flip, uint8_t* dst);

// Resizes the whole image so its shorter side is `short_side` (keeping the
// aspect ratio; area averaging when shrinking, so it does not alias), HWC.
void resize_short_side(const Image& src, int short_side, Image& out);

// Encoders; quality 1..100 for JPEG.
void encode_jpeg(const Image& img, int quality, std::vector<uint8_t>& out);
void encode_png(const Image& img, std::vector<uint8_t>& out);

}  // namespace ember::data
