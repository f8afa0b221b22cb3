// data/jpeg_turbo.h — JPEG decoding and encoding with libjpeg-turbo (its
// libjpeg API, Debian's libjpeg62-turbo-dev), for builds with JPEG=turbo
// (EMBER_JPEG_TURBO=1). data/image.cpp calls these for JPEGs and keeps
// stb_image for everything else and for builds without libjpeg-turbo.
//
// The decoder can work at a reduced scale — 1/2, 1/4 or 1/8, libjpeg's DCT
// scaling: the inverse DCT makes fewer pixels per 8x8 block instead of
// making them all and throwing most away — and on a part of the image: only
// the iMCU columns (jpeg_crop_scanline) and the rows (jpeg_skip_scanlines
// skips the inverse DCT and colour conversion of the rows above) that hold a
// given box. Entropy decoding always covers the whole scan up to the box's
// last row, so corrupt data there is still found.
//
// Errors are ember::Error with `what` first ("photos/cat/3.jpg: not a
// decodable image (libjpeg-turbo: Bogus marker length)"). Corrupt entropy
// data and a file cut short are errors, as with stb_image; warnings a valid
// picture survives (extraneous bytes before a marker, an unknown JFIF
// revision, a bad ICC marker) are not. Nothing here throws across libjpeg's
// C frames: its errors return through setjmp/longjmp to the frame that
// called it, and the exception is thrown from there.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ember::data {

struct Image;

// True when this build has libjpeg-turbo.
bool jpeg_turbo_built();

// What a JPEG's header says. False (and nothing thrown) when the bytes are
// not a JPEG libjpeg can read the header of; components is 1 (grey), 3
// (YCbCr or RGB) or 4 (CMYK/YCCK, which decode_jpeg_turbo cannot convert).
struct JpegHeader {
  int height = 0, width = 0, components = 0;
  bool convertible = false;  // grey, YCbCr or RGB: decode_jpeg_turbo can make 1 or 3 channels of it
};
bool read_jpeg_header(const uint8_t* bytes, size_t n, JpegHeader& header);

// The part of an image a reduced, partial decode should make: the image is
// reduced by `denom` (1, 2, 4 or 8; ceil(width / denom) x ceil(height /
// denom) pixels) and the rows [y0, y1) and columns [x0, x1) of the reduced
// image are wanted. An empty region (x1 == 0) means all of it.
struct JpegRegion {
  int denom = 1;
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Decodes `region` of a convertible JPEG to `channels` (1 or 3) interleaved
// pixels. The columns are widened to libjpeg's iMCU boundaries, so the
// result may start left of region.x0 and end right of region.x1: *out_x0 is
// the reduced image's column of out's first pixel, *out_y0 its row; the
// reduced image's size goes to *scaled_h / *scaled_w.
void decode_jpeg_turbo(const uint8_t* bytes, size_t n, int channels, const JpegRegion& region, Image& out, int* out_x0,
                       int* out_y0, int* scaled_h, int* scaled_w, const std::string& what);

// Baseline JPEG at `quality` (1..100), 4:2:0 chroma for colour images
// (libjpeg's defaults, as PIL and OpenCV), standard Huffman tables.
void encode_jpeg_turbo(const Image& img, int quality, std::vector<uint8_t>& out);

}  // namespace ember::data
