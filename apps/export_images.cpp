// apps/export_images.cpp — write Fashion-MNIST as a folder tree of image
// files, the input im2rec packs like any ImageNet-style folder:
//
//   build/export_images --data-dir /usr/share/datasets/fashion-mnist --out DIR
//       [--format png|jpeg] [--quality 95] [--limit-train N] [--limit-test N]
//
// writes DIR/train/<class>/<index>.png and DIR/test/<class>/<index>.png
// (data/image_folder.h's export_image_folder; '/' in class names becomes
// '_', so "T-shirt/top" is the folder T-shirt_top). Note that a folder tree's
// labels are the sorted folder names' order, not Fashion-MNIST's numbering.
#include <chrono>
#include <cstdio>
#include <string>

#include "apps/training/flags.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "engine/error.h"

namespace {

using namespace ember;

int run(int argc, char** argv) {
  std::string data_dir = data::kFashionMnistDir, out, format = "png";
  int quality = 95;
  int64_t limit_train = 0, limit_test = 0;
  apps::Flags f("export_images", "Write Fashion-MNIST as DIR/{train,test}/<class>/<index>.png (or .jpg) for im2rec.");
  f.add("data-dir", &data_dir, "directory with the Fashion-MNIST IDX files");
  f.add("out", &out, "output folder (required)");
  f.add("format", &format, "png or jpeg");
  f.add("quality", &quality, "JPEG quality (1-100)");
  f.add("limit-train", &limit_train, "export the first N training images only (0: all)");
  f.add("limit-test", &limit_test, "export the first N test images only (0: all)");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(!out.empty(), "--out DIR is required");
  EMBER_CHECK(format == "png" || format == "jpeg" || format == "jpg", "--format '", format, "' is not png or jpeg");
  EMBER_CHECK(limit_train >= 0 && limit_test >= 0, "--limit-train/--limit-test must be >= 0");
  const data::ExportFormat fmt = format == "png" ? data::ExportFormat::png : data::ExportFormat::jpeg;
  const std::vector<std::string> names(data::kFashionMnistClassNames.begin(), data::kFashionMnistClassNames.end());
  for (const bool train : {true, false}) {
    const auto start = std::chrono::steady_clock::now();
    data::ImageSet set = data::load_fashion_mnist(data_dir, train);
    const int64_t limit = train ? limit_train : limit_test;
    if (limit > 0 && limit < set.count) set = data::subset(set, 0, limit);
    const std::string dir = out + (train ? "/train" : "/test");
    const data::ExportReport r = data::export_image_folder(set, names, dir, fmt, quality);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s: %lld images -> %s (%.1f MB, %.2f s)\n", set.name.c_str(), (long long)r.files, dir.c_str(),
                double(r.bytes) / 1e6, s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "export_images: %s\n", e.what());
    return 1;
  }
}
