// tests/fuzz/fuzz_jpeg.cpp — libFuzzer target of JPEG decoding through
// data::decode_image() and the loader's decode-crop-resize path (see
// tests/fuzz/image_target.h for the input layout and what is run). Today the
// decoder is stb_image; a JPEG decoder added behind decode_image or the
// loader is covered by this same target.
// Seeds: tests/fuzz/corpus/fuzz_jpeg (small baseline, progressive, grey and
// restart-interval JPEGs from tests/fuzz/make_seeds.cpp); dictionary
// tests/fuzz/fuzz_jpeg.dict (JPEG markers).
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, > 1 s) is a bug in the JPEG decode path or the loader.
#include "tests/fuzz/image_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ember::fuzz::run_image_input(data, size);
}
