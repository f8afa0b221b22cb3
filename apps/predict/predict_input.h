// apps/predict/predict_input.h — what build/predict does to an image before
// the model sees it: the validation preprocessing (decode, resize the short
// side, centre crop) into a u8 planar slot of a batch. (The model's input
// normalisation is apps/training/input_norm.h.)
//
// The pixels are the ones the record loader's validation path
// (data/image_loader.h, LoaderOptions::validation) gives for the same
// encoded bytes: decode with data::decode_image, crop the box of
// data::validation_crop_box, resize it bilinearly with data::resize_to_planar.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image.h"

namespace ember::apps {

// Decodes `n` encoded bytes to `channels` (1 grey, 3 RGB), resizes the short
// side to `resize` and crops the centre size x size (one bilinear resize of
// the crop box), writing channels * size * size planar bytes to dst.
// `scratch` holds the decoded image (reused between calls). Errors start
// with `what` (the file name).
void preprocess_image(const uint8_t* bytes, size_t n, int channels, int size, int resize, uint8_t* dst,
                      const std::string& what, data::Image& scratch);

// The same for an image file; errors name the path (missing, unreadable,
// not a decodable image).
void preprocess_image_file(const std::string& path, int channels, int size, int resize, uint8_t* dst,
                           data::Image& scratch);

}  // namespace ember::apps
