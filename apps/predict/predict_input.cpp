// apps/predict/predict_input.cpp — validation preprocessing of image files for build/predict.
#include "apps/predict/predict_input.h"

#include "data/augment_rrc.h"
#include "engine/error.h"
#include "engine/file_io.h"

namespace ember::apps {

void preprocess_image(const uint8_t* bytes, size_t n, int channels, int size, int resize, uint8_t* dst,
                      const std::string& what, data::Image& scratch) {
  EMBER_CHECK(channels == 1 || channels == 3, what, ": the model takes ", channels, " channels (1 or 3)");
  data::decode_image(bytes, n, channels, scratch, what);
  const data::Box box = data::validation_crop_box(scratch.height, scratch.width, size, resize);
  data::resize_to_planar(scratch, box, size, size, /*flip=*/false, dst);
}

void preprocess_image_file(const std::string& path, int channels, int size, int resize, uint8_t* dst,
                           data::Image& scratch) {
  const std::vector<uint8_t> bytes = read_file(path);
  preprocess_image(bytes.data(), bytes.size(), channels, size, resize, dst, path, scratch);
}

}  // namespace ember::apps
