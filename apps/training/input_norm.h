// apps/training/input_norm.h — the model's input normalisation from per-channel
// mean/std in 0-255 units: given by --rgb-mean/--rgb-std, recorded in a
// checkpoint's metadata (input_mean/input_std, written by the training
// programs), or defaults. Used by train_resnet's data, finetune_resnet (the
// pretrained file's normalisation) and predict.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "ops/kernels.h"

namespace ember::apps {

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
