// apps/training/checkpoint_mismatch.h — why a checkpoint does not fit the
// ResNet a run builds from its flags, said in the error of a --resume or
// --load-epoch: the tensor that differs (net::load_model), then the likely
// cause and the flag that fixes it. (Apart from training_checkpoint.cpp,
// which the .states fuzzer links without the ResNet code.)
#pragma once
#include <string>

#include "net/resnet.h"
#include "net/safetensors.h"

namespace ember::apps {

// What most likely keeps a checkpoint from fitting `model`, as one clause:
// "the checkpoint was written by resnet-18 (its metadata) and this run builds
// resnet-50: pass --num-layers 18"; else a different class count, input
// channels, stem or width. Read from the metadata train_program writes
// (num_layers, num_classes, in_channels, stem_kernel, width, image_size),
// else from the tensors (net::infer_resnet_config). "" when none differs.
std::string checkpoint_mismatch_cause(const SafetensorsFile& file, const net::ResNet& model);

// net::load_model for a checkpoint this run resumes from; a mismatch error
// names the tensor, then the likely cause.
void load_resume_checkpoint(const std::string& path, net::ResNet& model);

}  // namespace ember::apps
