// apps/common/predict_input.h — what build/predict does to an image before
// the model sees it: the validation preprocessing (decode, resize the short
// side, centre crop) into a u8 planar slot of a batch, and the model's input
// normalisation (per-channel mean/std from the flags, the checkpoint's
// metadata or the defaults).
//
// The pixels are the ones the record loader's validation path
// (data/image_loader.h, LoaderOptions::validation) gives for the same
// encoded bytes: decode with data::decode_image, crop the box of
// data::validation_crop_box, resize it bilinearly with data::resize_to_planar.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/image.h"
#include "ops/kernels.h"

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

// Per-channel mean and standard deviation in 0-255 units, and where each came from.
struct InputStats {
  std::vector<double> mean, std;
  std::string mean_source, std_source;  // "--rgb-mean", "checkpoint metadata" or "default"
};

// Each of mean and std from (first found): the flag's text (0-255 values,
// comma-separated, one per channel), the checkpoint metadata's "input_mean" /
// "input_std" (the same format; errors name `model_path`), or the defaults:
// ImageNet's for 3 channels (123.675,116.28,103.53 / 58.395,57.12,57.375),
// the middle grey for 1 (127.5 / 63.75) — train_resnet's for record data.
InputStats resolve_input_stats(const std::string& mean_flag, const std::string& std_flag,
                               const std::map<std::string, std::string>& metadata, const std::string& model_path,
                               int channels);

// The model's ChannelNorm for stats in 0-255 units (mean / 255, 255 / std).
ChannelNorm channel_norm(const InputStats& stats);

}  // namespace ember::apps
