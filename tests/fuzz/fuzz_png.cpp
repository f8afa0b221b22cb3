// tests/fuzz/fuzz_png.cpp — libFuzzer target of PNG decoding through
// data::decode_image() and the loader's decode-crop-resize path (see
// tests/fuzz/image_target.h for the input layout and what is run).
// Seeds: tests/fuzz/corpus/fuzz_png (grey, RGB, RGBA, palette and 16-bit PNGs
// from tests/fuzz/make_seeds.cpp); dictionary tests/fuzz/fuzz_png.dict (chunk
// names).
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, > 1 s) is a bug in the PNG decode path or the loader.
#include "tests/fuzz/image_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ember::fuzz::run_image_input(data, size);
}
