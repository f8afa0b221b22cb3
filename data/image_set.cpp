// data/image_set.cpp — ImageSet size checks and subsets.
#include "data/image_set.h"

#include "engine/error.h"

namespace ember::data {

int64_t image_bytes(const ImageSet& set) { return set.channels * set.height * set.width; }

void check_image_set(const ImageSet& set) {
  const std::string& n = set.name;
  EMBER_CHECK(set.count >= 0 && set.channels > 0 && set.height > 0 && set.width > 0, n,
              ": bad image set geometry: count ", set.count, ", ", set.channels, "x", set.height, "x", set.width);
  EMBER_CHECK(set.num_classes > 0, n, ": image set has ", set.num_classes, " classes");
  EMBER_CHECK(set.pixels.size() == size_t(set.count * image_bytes(set)), n, ": image set holds ",
              set.pixels.size(), " pixel bytes, expected ", set.count, " x ", image_bytes(set));
  EMBER_CHECK(set.labels.size() == size_t(set.count), n, ": image set holds ", set.labels.size(),
              " labels for ", set.count, " images");
  for (size_t i = 0; i < set.labels.size(); ++i)
    EMBER_CHECK(set.labels[i] >= 0 && set.labels[i] < set.num_classes, n, ": label ", set.labels[i], " of image ",
                i, " is outside [0, ", set.num_classes, ")");
}

ImageSet subset(const ImageSet& set, int64_t first, int64_t count) {
  check_image_set(set);
  EMBER_CHECK(first >= 0 && count >= 0 && first <= set.count && count <= set.count - first, set.name,
              ": subset [", first, ", ", first + count, ") is outside the ", set.count, " images");
  ImageSet out;
  out.count = count;
  out.channels = set.channels;
  out.height = set.height;
  out.width = set.width;
  out.num_classes = set.num_classes;
  const int64_t ib = image_bytes(set);
  out.pixels.assign(set.pixels.begin() + first * ib, set.pixels.begin() + (first + count) * ib);
  out.labels.assign(set.labels.begin() + first, set.labels.begin() + first + count);
  out.name = cat(set.name, "[", first, ":", first + count, "]");
  return out;
}

ImageSet select_classes(const ImageSet& set, const std::vector<int>& classes) {
  check_image_set(set);
  EMBER_CHECK(classes.size() >= 2, set.name, ": select at least 2 classes (a classifier of ", classes.size(),
              " class learns nothing)");
  std::vector<int> new_label(size_t(set.num_classes), -1);
  std::string list;
  for (size_t i = 0; i < classes.size(); ++i) {
    const int c = classes[i];
    EMBER_CHECK(c >= 0 && c < set.num_classes, set.name, ": class ", c, " is not in [0, ", set.num_classes, ")");
    EMBER_CHECK(new_label[size_t(c)] < 0, set.name, ": class ", c, " is selected twice");
    new_label[size_t(c)] = int(i);
    if (i > 0) list += ',';
    list += std::to_string(c);
  }
  ImageSet out;
  out.channels = set.channels;
  out.height = set.height;
  out.width = set.width;
  out.num_classes = int(classes.size());
  const int64_t ib = image_bytes(set);
  for (int64_t i = 0; i < set.count; ++i) {
    const int label = new_label[size_t(set.labels[size_t(i)])];
    if (label < 0) continue;
    out.pixels.insert(out.pixels.end(), set.pixels.begin() + i * ib, set.pixels.begin() + (i + 1) * ib);
    out.labels.push_back(label);
  }
  out.count = int64_t(out.labels.size());
  out.name = cat(set.name, "{", list, "}");
  EMBER_CHECK(out.count > 0, out.name, ": no images of the selected classes");
  return out;
}

}  // namespace ember::data
