// net/resnet.h — the ResNet family with torchvision's structure and names.
//
// ImageNet-style (He et al. 2015, torchvision "v1.5": stride in the 3x3 conv):
//   18, 34 (BasicBlock) and 50, 101, 152 (Bottleneck, expansion 4):
//   conv1 7x7/2, bn1, relu, maxpool 3/2, layer1..layer4 (64, 128, 256, 512), avgpool, fc.
// CIFAR-style (He et al. section 4.2): depth 6n+2 = 20, 32, 44, 56, 110:
//   conv1 3x3/1 (16), bn1, relu, layer1..layer3 (16, 32, 64 channels, n BasicBlocks
//   each), avgpool, fc. Shortcuts that change shape are 1x1 conv + BN
//   projections ("option B", as torchvision's downsample).
// Small inputs (<= 32 pixels, e.g. Fashion-MNIST's 28x28): ImageNet-style nets
// use a 3x3/1 stem without the max-pool, as MXNet's resnet symbol and the
// usual CIFAR adaptations of torchvision models do. conv1.weight is then
// [64, C, 3, 3] instead of [64, C, 7, 7]; every other name and shape matches.
//
// The model's first op normalises uint8 input with the per-channel mean/std
// (u8 [N, C, H, W] -> float); float input is taken as already normalised.
//
// The head pools the last stage's C channels to features for fc: global
// average pooling (torchvision), or concat pooling (fast.ai's
// AdaptiveConcatPool2d, timm's "catavgmax"): [average, max] of each channel,
// 2C features, so fc.weight is [classes, 2C]. (timm's order; fast.ai puts
// the max first.) Checkpoints say which in their metadata: "pool" is "avg"
// or "concat", absent meaning avg (net/pretrained.h reads it).
//
// With dropout > 0 (timm's drop_rate), the features pass a Dropout before fc
// in training; it has no parameters, so checkpoints are unchanged by it.
#pragma once
#include <memory>
#include <string>

#include "engine/rng.h"
#include "net/layers.h"

namespace ember::net {

// What the head pools the last feature map with.
enum class HeadPool { avg, concat };
// "avg" or "concat": the checkpoint metadata's "pool" value.
const char* head_pool_name(HeadPool pool);
// The inverse; any other text is an error naming `where` (a file or flag).
HeadPool parse_head_pool(const std::string& text, const std::string& where);

struct ResNetConfig {
  int num_layers = 20;
  int64_t num_classes = 10;
  int64_t in_channels = 1;
  int64_t image_size = 28;          // decides the small-input stem (unless stem_kernel is set)
  // ImageNet-style only: 3 (3x3/1 stem, no max-pool) or 7 (7x7/2 + max-pool);
  // 0: from image_size (3 when <= 32 pixels). Pretrained files decide it.
  int stem_kernel = 0;
  // Channels of the stem and of layer1 (layer2..4: 2x, 4x, 8x; x4 after a
  // bottleneck); 0: torchvision's 64 (ImageNet-style) or 16 (CIFAR-style).
  // Narrow widths make small models with torchvision's structure.
  int64_t width = 0;
  bool zero_init_residual = false;  // last BN of each block starts at gamma = 0
  HeadPool pool = HeadPool::avg;    // concat: fc takes [avg, max] of every channel (2C inputs)
  double dropout = 0;               // > 0: dropout of the features before fc (training only)
  ChannelNorm input_norm{};         // applied to uint8 input
  DType dtype = DType::f32;
};

// The depths ResNet accepts: ImageNet-style 18, 34, 50, 101, 152, and
// CIFAR-style 6n+2 other than those (8, 14, 20, 26, 32, 44, 56, 110, ...).
bool is_cifar_depth(int num_layers);
bool is_imagenet_depth(int num_layers);

class BasicBlock : public Module {
 public:
  static constexpr int64_t expansion = 1;
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, DType dtype);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2;
  std::shared_ptr<BatchNorm2d> bn1, bn2;
  std::shared_ptr<Sequential> downsample;  // null when the shortcut is the identity
};

class Bottleneck : public Module {
 public:
  static constexpr int64_t expansion = 4;
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, DType dtype);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;
};

class ResNet : public Module {
 public:
  // Builds and initialises (torchvision's init: conv kaiming_normal fan_out,
  // BN gamma 1 beta 0, fc PyTorch default) from the generator.
  ResNet(const ResNetConfig& config, Generator& gen);
  Tensor forward(const Tensor& x) override;
  const ResNetConfig& config() const { return config_; }
  // "resnet-20 (CIFAR-style, 0.27M parameters)"; ", concat pool" and
  // ", dropout 0.5" added for those heads.
  std::string describe() const;

  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;
  std::shared_ptr<MaxPool2d> maxpool;  // null for CIFAR-style and small-input stems
  std::vector<std::shared_ptr<Sequential>> layers;
  std::shared_ptr<Dropout> dropout;  // null unless config.dropout > 0
  std::shared_ptr<Linear> fc;

 private:
  ResNetConfig config_;
  int64_t parameter_count_ = 0;
};

}  // namespace ember::net
