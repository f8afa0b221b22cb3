// data/fashion_mnist.h — Fashion-MNIST (Zalando, 10 classes of 28x28 grey
// clothing images, 60000 train / 10000 test) read from its four IDX files.
//
// Debian's package dataset-fashion-mnist installs the files in
// kFashionMnistDir; apps take --data-dir to point elsewhere. Plain (un-gzip'd)
// copies of the files are accepted too.
#pragma once
#include <array>
#include <string>

#include "data/image_set.h"

namespace ember::data {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kFashionMnistClasses = 10;
inline constexpr std::array<const char*, kFashionMnistClasses> kFashionMnistClassNames = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

// Loads the training (train=true) or test set from dir: an ImageSet of
// [n, 1, 28, 28] uint8 images named "fashion-mnist/train" or "fashion-mnist/test".
// Checks that image and label counts agree, images are 28x28 and labels are
// in [0, 10); a missing directory or file is an error that says where the
// files come from.
ImageSet load_fashion_mnist(const std::string& dir, bool train);

}  // namespace ember::data
