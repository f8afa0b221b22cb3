// data/image_set.h — a labelled set of equally sized uint8 images in memory.
//
// Readers of small data sets (data/fashion_mnist.h) return an ImageSet; the
// BatchIterator (data/batch_iterator.h) draws shuffled, augmented batches
// from it. Pixels stay uint8 NCHW here; the model normalises them
// (ops::normalize_u8) as its first op.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::data {

struct ImageSet {
  int64_t count = 0, channels = 0, height = 0, width = 0;
  int num_classes = 0;
  std::vector<uint8_t> pixels;  // [count, C, H, W]
  std::vector<int64_t> labels;  // [count], each in [0, num_classes)
  std::string name;             // for messages and logs: "fashion-mnist/train"
};

// Bytes of one image: channels * height * width.
int64_t image_bytes(const ImageSet& set);

// Throws ember::Error unless the sizes are positive, pixels and labels hold
// count entries, and every label is in [0, num_classes).
void check_image_set(const ImageSet& set);

// A copy of images [first, first + count) (e.g. a validation split or a
// quick-test subset); the name gets "[first:first+count]" appended.
ImageSet subset(const ImageSet& set, int64_t first, int64_t count);

// The images of the listed classes only, relabelled by their position in
// `classes` (classes[i] becomes label i; num_classes = classes.size()), in
// their original order; the name gets "{5,6,7}" appended. Errors on a class
// outside [0, num_classes) or listed twice.
ImageSet select_classes(const ImageSet& set, const std::vector<int>& classes);

}  // namespace ember::data
