// apps/training/pretrained_settings.h — a fine-tuning run takes what the
// pretrained model was trained with, unless its flags say otherwise: the
// settings an ember checkpoint's metadata records (train_program writes
// in_channels, image_size, val_resize, input_mean, input_std and pool) and
// the depth its tensors show. A file without that metadata (a torchvision or
// timm export) keeps the program's defaults, and the line printed says so.
#pragma once
#include <string>

#include "apps/training/flags.h"
#include "apps/training/train_settings.h"
#include "net/pretrained.h"
#include "net/safetensors.h"

namespace ember::apps {

// Sets each of these whose flag was not given (Flags::was_set), from the
// pretrained file `path` (`r`: what its tensors say):
//   --num-layers           the depth of its tensors (a given one must agree)
//   --image-shape          in_channels,image_size,image_size (record data;
//                          Fashion-MNIST is 1x28x28 whatever the file says)
//   --val-resize           val_resize, with the image shape
//   --rgb-mean, --rgb-std  input_mean, input_std, when they have a value
//                          per channel of the data
//   --pool                 pool (the new head pools as the backbone learnt)
// Returns the one line that says what was taken and from where:
// "from checkpoint PATH: resnet-18, image shape 3,64,64, validation resize
// 73, mean 123.675,116.28,103.53, std 58.395,57.12,57.375, pool avg".
// Malformed metadata is an error naming the file and the key.
std::string adopt_pretrained_settings(TrainSettings& s, const Flags& flags, const SafetensorsFile& file,
                                      const std::string& path, const net::InferredResNet& r);

}  // namespace ember::apps
