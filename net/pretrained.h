// net/pretrained.h — loading weights someone else trained: torchvision / timm
// ResNets saved as safetensors, and ember's own checkpoints.
//
// Unlike net::load_model (ember's strict resume), loading pretrained weights
// is forgiving where users' files legitimately differ and exact where they
// must not:
//   * a "module." prefix (a state_dict saved from DataParallel/DDP) is dropped;
//   * F16, BF16 and F64 tensors are converted to the model's dtype (other
//     dtypes are refused by the safetensors parser, naming them);
//   * batch norm's num_batches_tracked may be absent (older torchvision files);
//   * tensors under the head prefix ("fc." by default) are not loaded when the
//     head is replaced: the model keeps its freshly initialised head of
//     --num-classes, and the file's head may have any shape;
//   * everything else must match name for name and shape for shape. All
//     problems are gathered into one error line: the missing names, the
//     unexpected names and the shape mismatches (a few of each, then counts),
//     with the file's path and what to check.
// infer_resnet_config reads depth, width, stem, input channels and classes
// from the tensor names and shapes alone, so apps need no --num-layers for a
// file whose structure says it; and the head's pooling from the metadata's
// "pool" ("avg" or "concat", absent: avg, as in torchvision files), which no
// tensor shows.
#pragma once
#include <string>
#include <vector>

#include "net/module.h"
#include "net/resnet.h"
#include "net/safetensors.h"

namespace ember::net {

struct PretrainedOptions {
  // Tensors whose names start with this are the classifier head.
  std::string head_prefix = "fc.";
  // true: the head is not loaded (the model's fresh head stays); false: it
  // must match like every other tensor.
  bool replace_head = true;
};

struct PretrainedReport {
  int64_t loaded = 0;                    // tensors copied into the model
  std::vector<std::string> head_skipped;  // file tensors under the head prefix, not loaded
  int64_t converted = 0;                 // tensors whose dtype was converted
  std::string converted_from;            // e.g. "F16" (the file's dtypes that were converted)
  bool stripped_module_prefix = false;   // names started with "module."
  int64_t missing_batch_counters = 0;    // num_batches_tracked absent: set to 0 (as PyTorch does)
  // "loaded 320 tensors (F16 -> f32), head fc.weight, fc.bias replaced by a fresh 257-class head"
  std::string describe() const;
};

// Copies the file's tensors into the model (on any device) after checking
// all of them; on any problem the model is left untouched and one ember::Error
// names the file and every kind of mismatch.
PretrainedReport load_pretrained(const std::string& path, Module& model, const PretrainedOptions& options = {});
PretrainedReport load_pretrained(const SafetensorsFile& file, const std::string& path, Module& model,
                                 const PretrainedOptions& options = {});

// What the tensors of a torchvision-named ResNet say about it.
struct InferredResNet {
  int num_layers = 0;        // 18, 50, ... or a CIFAR-style 6n+2
  int64_t width = 0;         // conv1's output channels
  int stem_kernel = 0;       // 7 or 3
  int64_t in_channels = 0;   // conv1's input channels
  int64_t num_classes = 0;   // rows of <head>weight (0 when the head is absent)
  bool bottleneck = false;
  HeadPool pool = HeadPool::avg;  // metadata "pool"; concat: fc takes 2C features
  // Metadata "variant"; absent: mxnet-preact when input_bn.weight is there,
  // gluon-v1 when a bottleneck's conv1 has a bias, else torchvision.
  ResNetVariant variant = ResNetVariant::torchvision;
  // The ResNetConfig of this structure (image_size and input_norm left at
  // their defaults for the caller to set).
  ResNetConfig config() const;
};
// Errors (naming `path`) when the names are not a torchvision ResNet's, the
// block counts are not a depth ember builds, or the metadata's "pool" is
// neither avg nor concat.
InferredResNet infer_resnet_config(const SafetensorsFile& file, const std::string& path,
                                   const std::string& head_prefix = "fc.");

}  // namespace ember::net
