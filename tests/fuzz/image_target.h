// tests/fuzz/image_target.h — the body of the image-decoding targets
// (fuzz_jpeg.cpp, fuzz_png.cpp): one encoded image through both paths that
// decode outside bytes.
//
// Input: one mode byte, then the encoded image. The image goes through
//   1. data::decode_image() to `channels` 0, 1 or 3 (im2rec's decode check,
//      predict), and
//   2. the loader's path: a one-record .erec holding the bytes as the payload
//      (written by RecordWriter to the scratch folder), read by an ImageLoader
//      (1 thread, batch 1) with the mode's channels (1 or 3), augmentation
//      (random-resized-crop, pad-crop, none, validation centre crop) and output
//      size (8..68), so the decode, crop and resize of a real batch run on it.
// Expected: ember::Error (from decode_image directly, or rethrown by
// ImageLoader::next naming the record). Anything else is a bug in
// data/image.cpp (or the decoder it calls), data/image_loader.cpp or the
// resize code.
#pragma once
#include "data/image.h"
#include "data/image_loader.h"
#include "data/record_file.h"
#include "tests/fuzz/fuzz_util.h"

namespace ember::fuzz {

inline int run_image_input(const uint8_t* data, size_t size) {
  using namespace ember::data;
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const uint8_t* bytes = data + 1;
  const size_t n = size - 1;
  static const int kChannels[4] = {0, 1, 3, 3};
  Image img;
  bool decoded = false;
  try {
    decode_image(bytes, n, kChannels[mode & 3], img, "input");
    decoded = true;
    if (img.height <= 0 || img.width <= 0 || (img.channels != 1 && img.channels != 3) ||
        img.pixels.size() != size_t(img.height) * size_t(img.width) * size_t(img.channels))
      fuzz_fail("decode_image returned an inconsistent image");
  } catch (const Error& e) {
    check_one_line(e);
  }

  ScratchFiles scratch;
  const std::string path = scratch_dir() + "/image.erec";
  scratch.paths.push_back(path);
  try {
    {
      RecordWriter w(path, RecordFileSettings{});
      RecordInput in;
      in.id = 7;
      in.height = decoded ? uint32_t(img.height) : 1;
      in.width = decoded ? uint32_t(img.width) : 1;
      in.channels = decoded ? uint32_t(img.channels) : 3;
      in.encoding = sniff_encoding(bytes, n);
      in.payload = bytes;
      in.payload_length = n;
      w.add(in);
      w.finish();
    }
    const RecordDataset ds(path);
    LoaderOptions opt;
    opt.batch_size = 1;
    opt.threads = 1;
    opt.prefetch_batches = 1;
    opt.channels = (mode & 4) ? 1 : 3;
    opt.output_size = 8 + 4 * (mode >> 4);
    switch ((mode >> 2) & 3) {
      case 0: opt.augment = Augment::random_resized_crop; break;
      case 1: opt.augment = Augment::pad_crop, opt.pad = 4; break;
      case 2: opt.augment = Augment::none; break;
      default: opt.validation = true, opt.shuffle = false; break;
    }
    ImageLoader loader(ds, opt);
    loader.start_epoch(0);
    Batch batch;
    if (!loader.next(batch)) fuzz_fail("the loader gave no batch for a one-record file");
  } catch (const Error& e) {
    check_one_line(e);
  }
  return 0;
}

}  // namespace ember::fuzz
