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
//
// Variants (ResNetConfig::variant; checkpoints say which in their metadata
// "variant", absent meaning torchvision):
//   torchvision   as above.
//   gluon-v1      MXNet Gluon's model-zoo resnet*_v1: the same, except that a
//                 bottleneck puts its stride on the first 1x1 convolution, and
//                 its two 1x1 convolutions have biases (layerS.B.conv1.bias,
//                 conv3.bias).
//   mxnet-preact  MXNet's symbolic ResNet (example/image-classification
//                 symbols/resnet.py, what train_imagenet.py --network resnet and
//                 the model-zoo checkpoints of fine-tune.py build): pre-
//                 activation units. input_bn (a batch norm of the input with
//                 the scale fixed at 1) -> conv1 -> [bn1, relu, max-pool: the
//                 7x7 stem only] -> units -> final_bn, relu -> pool -> fc. A
//                 unit is x + F(x) with F = bn1, relu, conv1, bn2, relu, conv2
//                 (, bn3, relu, conv3 for a bottleneck, stride on the 3x3);
//                 in the first unit of every stage (even where the shape stays,
//                 as resnet.py does) the shortcut is a 1x1 convolution
//                 `shortcut` of relu(bn1(x)). Batch norms use eps 2e-5.
//                 net/mxnet_resnet.h maps MXNet's names to these.
#pragma once
#include <memory>
#include <string>

#include "engine/rng.h"
#include "net/layers.h"

namespace ember::net {

enum class ResNetVariant { torchvision, gluon_v1, mxnet_preact };
// "torchvision", "gluon-v1", "mxnet-preact": the metadata's "variant" value.
const char* resnet_variant_name(ResNetVariant v);
// The inverse; any other text is an error naming `where` (a file or flag).
ResNetVariant parse_resnet_variant(const std::string& text, const std::string& where);

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
  ResNetVariant variant = ResNetVariant::torchvision;
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
  // gluon_v1: the stride on conv1 and biases on conv1 and conv3.
  Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, DType dtype, bool gluon_v1 = false);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;
  std::shared_ptr<Sequential> downsample;
};

// A pre-activation unit (mxnet-preact): x + F(x), see above.
class PreActBlock : public Module {
 public:
  // projection: the shortcut is a 1x1 convolution (resnet.py: the first
  // unit of every stage), else the identity.
  PreActBlock(int64_t in_planes, int64_t planes, int64_t stride, bool bottleneck, bool projection, DType dtype);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<BatchNorm2d> bn1, bn2, bn3;  // bn3: bottleneck only
  std::shared_ptr<Conv2d> conv1, conv2, conv3;
  std::shared_ptr<Conv2d> shortcut;  // null when the shortcut is the identity
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

  std::shared_ptr<BatchNorm2d> input_bn;  // mxnet-preact only
  std::shared_ptr<Conv2d> conv1;
  std::shared_ptr<BatchNorm2d> bn1;       // null for mxnet-preact's 3x3 stem
  std::shared_ptr<MaxPool2d> maxpool;  // null for CIFAR-style and small-input stems
  std::shared_ptr<BatchNorm2d> final_bn;  // mxnet-preact only: before the pooling
  std::vector<std::shared_ptr<Sequential>> layers;
  std::shared_ptr<Dropout> dropout;  // null unless config.dropout > 0
  std::shared_ptr<Linear> fc;

 private:
  ResNetConfig config_;
  int64_t parameter_count_ = 0;
};

}  // namespace ember::net
