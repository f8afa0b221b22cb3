// apps/bench/bench_decode.cpp — milliseconds per image of JPEG decoding on one
// thread: stb_image against libjpeg-turbo whole, at 1/2, 1/4 and 1/8 scale,
// and the loader's per-sample path (decode, random-resized crop, resize)
// both ways at the output sizes asked for.
//
//   build/bench_decode --records photos.erec [--images 500] [--reps 3] [--sizes 224,128]
//
// The records are read into memory first (no disk in the timings); JPEG
// records only. Each figure is the median over --reps passes of the total
// time of one pass over the images, divided by their count. The loader path
// draws each image's crop box as the loader does (torchvision's
// RandomResizedCrop parameters from a Philox stream per image), so both
// decoders resize the same boxes.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "apps/training/bench_timing.h"
#include "apps/training/flags.h"
#include "data/augment_rrc.h"
#include "data/image.h"
#include "data/jpeg_turbo.h"
#include "data/record_file.h"
#include "engine/error.h"
#include "engine/rng.h"

namespace ember {
namespace {

using Bytes = std::vector<uint8_t>;

std::vector<int> parse_sizes(const std::string& list) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    char* tail = nullptr;
    const long v = std::strtol(item.c_str(), &tail, 10);
    EMBER_CHECK(!item.empty() && *tail == '\0' && v > 0 && v < 100000, "--sizes: '", item, "' is not a positive size");
    out.push_back(int(v));
    at = end + 1;
  }
  return out;
}

int run(int argc, char** argv) {
  std::string records, sizes_flag = "224,128";
  int64_t images = 500;
  int reps = 3;
  apps::Flags f("bench_decode", "ms per image of JPEG decoding: stb_image vs libjpeg-turbo, whole, reduced, loader path.");
  f.add("records", &records, "a record file (or list/folder of shards) of JPEG images");
  f.add("images", &images, "how many of its JPEG records to use (the first ones)");
  f.add("reps", &reps, "timed passes over the images (after one warm-up pass); the median is printed");
  f.add("sizes", &sizes_flag, "comma-separated output sizes of the loader path");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(!records.empty(), "--records is required");
  EMBER_CHECK(images > 0 && reps > 0, "--images and --reps must be positive");
  const std::vector<int> sizes = parse_sizes(sizes_flag);

  data::RecordDataset set(records);
  std::vector<Bytes> jpegs;
  data::Record rec;
  for (int64_t i = 0; i < set.size() && int64_t(jpegs.size()) < images; ++i) {
    set.read(i, rec);
    if (rec.encoding == data::Encoding::jpeg) jpegs.push_back(rec.payload);
  }
  EMBER_CHECK(!jpegs.empty(), records, ": no JPEG records");
  const double n = double(jpegs.size());
  std::printf("%zu JPEG images from %s, 1 thread, median of %d passes; libjpeg-turbo %s in this build\n", jpegs.size(),
              records.c_str(), reps, data::jpeg_turbo_built() ? "is" : "is NOT");
  auto report = [&](const std::string& what, auto&& pass) {
    std::printf("  %-52s %7.3f ms/image\n", what.c_str(), apps::median_ms(reps, pass) / n);
    std::fflush(stdout);
  };

  data::Image img;
  report("stb_image, whole image", [&] {
    for (const Bytes& b : jpegs) data::decode_image(b.data(), b.size(), 3, img, "bench", data::JpegDecoder::stb);
  });
  if (data::jpeg_turbo_built()) {
    for (int d : {1, 2, 4, 8}) {
      data::JpegRegion region;
      region.denom = d;
      report(d == 1 ? "libjpeg-turbo, whole image" : "libjpeg-turbo, whole image at 1/" + std::to_string(d), [&] {
        int x0, y0, h, w;
        for (const Bytes& b : jpegs) data::decode_jpeg_turbo(b.data(), b.size(), 3, region, img, &x0, &y0, &h, &w, "bench");
      });
    }
  }

  for (int S : sizes) {
    // Each image's box, drawn once (the same for both decoders).
    std::vector<data::Box> boxes;
    std::vector<int> reduction_count(9, 0);
    for (size_t i = 0; i < jpegs.size(); ++i) {
      const data::ImageInfo info = data::probe_image(jpegs[i].data(), jpegs[i].size(), "bench");
      PhiloxStream rng(0, i);
      boxes.push_back(data::random_resized_crop_box(info.height, info.width, 0.08, 1.0, 3.0 / 4.0, 4.0 / 3.0, rng));
      reduction_count[size_t(data::jpeg_reduction_for(boxes.back().height, boxes.back().width, S, S))]++;
    }
    std::vector<uint8_t> out(3 * size_t(S) * size_t(S));
    report("loader path " + std::to_string(S) + ", stb_image (whole decode, crop+resize)", [&] {
      for (size_t i = 0; i < jpegs.size(); ++i) {
        data::decode_image(jpegs[i].data(), jpegs[i].size(), 3, img, "bench", data::JpegDecoder::stb);
        data::resize_to_planar(img, boxes[i], S, S, false, out.data());
      }
    });
    if (data::jpeg_turbo_built()) {
      data::DecodedRegion region;
      report("loader path " + std::to_string(S) + ", libjpeg-turbo (box only, reduced)", [&] {
        for (size_t i = 0; i < jpegs.size(); ++i) {
          const data::ImageInfo info = data::probe_image(jpegs[i].data(), jpegs[i].size(), "bench");
          (void)info;
          data::decode_for_resize(jpegs[i].data(), jpegs[i].size(), 3, boxes[i], S, S, region, "bench");
          data::resize_region_to_planar(region, boxes[i], S, S, false, out.data());
        }
      });
      std::printf("    (crops decoded at 1/1: %d, 1/2: %d, 1/4: %d, 1/8: %d)\n", reduction_count[1], reduction_count[2],
                  reduction_count[4], reduction_count[8]);
    }
  }
  return 0;
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  try {
    return ember::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
}
