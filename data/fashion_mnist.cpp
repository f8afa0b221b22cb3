// data/fashion_mnist.cpp — Fashion-MNIST from its IDX files (data/idx.h).
#include "data/fashion_mnist.h"

#include <filesystem>

#include "data/idx.h"
#include "engine/error.h"

namespace ember::data {
namespace {

const char* const kHowToGet =
    "install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) "
    "or point --data-dir at a directory holding the four Fashion-MNIST IDX files";

// dir/stem.gz, else dir/stem; an error naming both when neither exists.
std::string find_file(const std::string& dir, const std::string& stem) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path gz = fs::path(dir) / (stem + ".gz"), plain = fs::path(dir) / stem;
  if (fs::exists(gz, ec)) return gz.string();
  if (fs::exists(plain, ec)) return plain.string();
  fail(cat("Fashion-MNIST: ", gz.string(), " not found (nor ", plain.string(), "); ", kHowToGet));
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

}  // namespace

ImageSet load_fashion_mnist(const std::string& dir, bool train) {
  std::error_code ec;
  EMBER_CHECK(std::filesystem::is_directory(dir, ec), "Fashion-MNIST: directory ", dir, " does not exist; ",
              kHowToGet);
  const std::string prefix = train ? "train" : "t10k";
  const std::string image_path = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string label_path = find_file(dir, prefix + "-labels-idx1-ubyte");

  IdxArray images = read_idx(image_path);
  IdxArray labels = read_idx(label_path);
  EMBER_CHECK(images.dims.size() == 3 && images.dims[1] == 28 && images.dims[2] == 28, image_path,
              ": expected images of shape [n, 28, 28], file holds ", dims_str(images.dims));
  EMBER_CHECK(labels.dims.size() == 1, label_path, ": expected labels of shape [n], file holds ",
              dims_str(labels.dims));
  EMBER_CHECK(images.dims[0] == labels.dims[0], "Fashion-MNIST: ", image_path, " holds ", images.dims[0],
              " images but ", label_path, " holds ", labels.dims[0], " labels");

  ImageSet set;
  set.count = images.dims[0];
  set.channels = 1;
  set.height = 28;
  set.width = 28;
  set.num_classes = kFashionMnistClasses;
  set.pixels = std::move(images.bytes);
  set.labels.resize(labels.bytes.size());
  for (size_t i = 0; i < labels.bytes.size(); ++i) {
    const int label = labels.bytes[i];
    EMBER_CHECK(label < kFashionMnistClasses, label_path, ": label ", label, " of image ", i,
                " is outside [0, ", kFashionMnistClasses, ")");
    set.labels[i] = label;
  }
  set.name = train ? "fashion-mnist/train" : "fashion-mnist/test";
  return set;
}

}  // namespace ember::data
