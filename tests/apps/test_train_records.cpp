// tests/apps/test_train_records.cpp — end to end through the record path, on real
// data: Fashion-MNIST (Debian's dataset-fashion-mnist) exported to a folder
// tree of PNG files (data/image_folder.h), packed into record files by the
// im2rec library (data/packer.h), read back by the threaded loader
// (data/image_loader.h) and trained with the same fit() loop, model and
// recipe (tests/support/train_recipe.h) as tests/apps/test_train_integration.cpp's IDX run
// (ResNet-14, 5k images, 3 epochs, batch 32, cosine lr 0.05, no augmentation). It must land in the
// same band: >= 80% on the first 1k test images. Before training, the
// validation batches are compared pixel for pixel with the IDX images (PNG
// is lossless), so a wrong crop, resize or channel order cannot hide behind
// an accuracy figure.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include "apps/training/batch_source.h"
#include "apps/training/fit.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "data/image_loader.h"
#include "data/packer.h"
#include "data/record_file.h"
#include "net/resnet.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"
#include "tests/support/train_recipe.h"

namespace {

using namespace ember;
namespace fs = std::filesystem;
using ember::testing::small_recipe;
using ember::testing::small_resnet_config;
using ember::testing::TempDir;

// Exports `set` as PNGs under dir/<tag>/ and packs them (original bytes kept)
// into dir/<tag>.erec; returns the record file's path.
std::string export_and_pack(const data::ImageSet& set, const fs::path& dir, const std::string& tag) {
  const std::vector<std::string> names(data::kFashionMnistClassNames.begin(), data::kFashionMnistClassNames.end());
  const data::ExportReport exported =
      data::export_image_folder(set, names, (dir / tag).string(), data::ExportFormat::png);
  REQUIRE(exported.files == set.count);
  const data::SourceList source = data::list_image_folder((dir / tag).string());
  REQUIRE(int64_t(source.items.size()) == set.count);
  data::PackOptions po;
  po.pass_through = true;
  po.threads = 2;
  const data::PackReport report = data::pack(source.items, source.class_names, (dir / tag).string(), po);
  REQUIRE(report.packed == set.count);
  REQUIRE(report.skipped.empty());
  REQUIRE(report.outputs.size() == 1);
  return report.outputs[0].path;
}

data::LoaderOptions loader_options(bool validation) {
  data::LoaderOptions lo;
  lo.batch_size = validation ? 500 : 32;
  lo.threads = 2;
  lo.channels = 1;
  lo.output_size = 28;
  lo.augment = data::Augment::none;
  lo.flip = false;
  lo.seed = 0;
  lo.validation = validation;
  lo.shuffle = !validation;
  lo.val_resize = 28;  // the centre crop of a 28x28 image at 28: the whole image
  return lo;
}

}  // namespace

TEST_CASE("integration: Fashion-MNIST as PNG folders -> im2rec -> loader trains ResNet-14 to >= 80%" *
          ember::testing::slow_variant) {
  const TempDir tmp;
  const fs::path& dir = tmp.path;
  const data::ImageSet train = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, true), 0, 5000);
  const data::ImageSet test = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, false), 0, 1000);

  const auto t0 = std::chrono::steady_clock::now();
  const data::RecordDataset train_records(export_and_pack(train, dir, "train"));
  const data::RecordDataset test_records(export_and_pack(test, dir, "test"));
  const double pack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(train_records.size() == 5000);
  CHECK(train_records.num_classes() == 10);
  CHECK(train_records.class_names().at(0) == "Ankle boot");  // sorted folder names
  CHECK(train_records.class_names().at(8) == "T-shirt_top");

  // The records give back exactly the IDX images and labels. Labels are
  // positions among the sorted class folder names (ImageFolder's rule), so
  // IDX label k is the record label of class folder_name(k).
  const auto& names = test_records.class_names();
  auto record_label = [&](int64_t idx_label) {
    const std::string folder = data::class_folder_name(data::kFashionMnistClassNames[size_t(idx_label)]);
    return int64_t(std::find(names.begin(), names.end(), folder) - names.begin());
  };
  data::ImageLoader val_loader(test_records, loader_options(true));
  {
    std::map<std::string, std::vector<int64_t>> idx_images;  // pixels -> labels (duplicates exist)
    for (int64_t i = 0; i < test.count; ++i) {
      const uint8_t* p = test.pixels.data() + i * 28 * 28;
      idx_images[std::string(reinterpret_cast<const char*>(p), 28 * 28)].push_back(record_label(test.labels[size_t(i)]));
    }
    val_loader.start_epoch(0);
    data::Batch b;
    int64_t seen = 0, matched = 0;
    while (val_loader.next(b)) {
      REQUIRE(b.images.shape() == Shape{b.size, 1, 28, 28});
      const uint8_t* px = b.images.data<uint8_t>();
      const int64_t* labels = b.labels.data<int64_t>();
      for (int64_t j = 0; j < b.size; ++j, ++seen) {
        const auto it = idx_images.find(std::string(reinterpret_cast<const char*>(px + j * 784), 784));
        if (it != idx_images.end() &&
            std::find(it->second.begin(), it->second.end(), labels[j]) != it->second.end())
          ++matched;
      }
    }
    CHECK(seen == 1000);
    CHECK(matched == 1000);
  }

  Generator gen(0);
  net::ResNet model(small_resnet_config(), gen);

  data::ImageLoader train_loader(train_records, loader_options(false));
  apps::LoaderSource train_source(train_loader), val_source(val_loader);
  const apps::FitOptions fo = small_recipe(3);
  const auto t1 = std::chrono::steady_clock::now();
  const apps::FitResult r = apps::fit(model, train_source, &val_source, fo);
  const double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  MESSAGE("record path: export + pack of 6k PNGs " << pack_seconds << " s; ResNet-14, 3 epochs over 5k images: "
                                                   << "test accuracy " << r.validation_accuracy << " on 1k images, "
                                                   << train_seconds << " s");
  CHECK(r.validation_accuracy >= 0.80);
  CHECK(r.steps == 3 * ((5000 + 31) / 32));
  CHECK(train_loader.bad_records() == 0);
}
