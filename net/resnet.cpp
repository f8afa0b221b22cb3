// net/resnet.cpp — BasicBlock, Bottleneck and the ResNet builders.
#include "net/resnet.h"

#include <array>
#include <cstdio>

#include "net/init.h"

namespace ember::net {
namespace {

std::shared_ptr<Sequential> make_downsample(int64_t in, int64_t out, int64_t stride, DType dtype) {
  auto seq = std::make_shared<Sequential>();
  seq->append(std::make_shared<Conv2d>(in, out, 1, stride, 0, /*bias=*/false, dtype));
  seq->append(std::make_shared<BatchNorm2d>(out, 1e-5, 0.1, dtype));
  return seq;
}

// Blocks per stage of the ImageNet-style depths.
std::array<int, 4> imagenet_stages(int depth) {
  switch (depth) {
    case 18: return {2, 2, 2, 2};
    case 34: return {3, 4, 6, 3};
    case 50: return {3, 4, 6, 3};
    case 101: return {3, 4, 23, 3};
    case 152: return {3, 8, 36, 3};
  }
  return {0, 0, 0, 0};
}

}  // namespace

const char* resnet_variant_name(ResNetVariant v) {
  switch (v) {
    case ResNetVariant::gluon_v1: return "gluon-v1";
    case ResNetVariant::mxnet_preact: return "mxnet-preact";
    case ResNetVariant::torchvision: break;
  }
  return "torchvision";
}

ResNetVariant parse_resnet_variant(const std::string& text, const std::string& where) {
  for (ResNetVariant v : {ResNetVariant::torchvision, ResNetVariant::gluon_v1, ResNetVariant::mxnet_preact})
    if (text == resnet_variant_name(v)) return v;
  fail(cat(where, ": variant '", text, "' is not torchvision, gluon-v1 or mxnet-preact"));
}

const char* head_pool_name(HeadPool pool) { return pool == HeadPool::concat ? "concat" : "avg"; }

HeadPool parse_head_pool(const std::string& text, const std::string& where) {
  if (text == "avg") return HeadPool::avg;
  if (text == "concat") return HeadPool::concat;
  fail(cat(where, ": pool '", text, "' is not avg or concat"));
}

bool is_imagenet_depth(int n) { return n == 18 || n == 34 || n == 50 || n == 101 || n == 152; }
// 6n+2, except the ImageNet depths 50 and 152 that also have that form.
bool is_cifar_depth(int n) { return n >= 8 && (n - 2) % 6 == 0 && !is_imagenet_depth(n); }

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride, DType dtype) {
  conv1 = register_module("conv1", std::make_shared<Conv2d>(in_planes, planes, 3, stride, 1, /*bias=*/false, dtype));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes, 1e-5, 0.1, dtype));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(planes, planes, 3, 1, 1, /*bias=*/false, dtype));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes, 1e-5, 0.1, dtype));
  if (stride != 1 || in_planes != planes)
    downsample = register_module("downsample", make_downsample(in_planes, planes, stride, dtype));
}

// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = bn1->forward_relu(*conv1, x);
  return bn2->forward_add_relu(*conv2, y, downsample ? (*downsample)(x) : x);
}

Bottleneck::Bottleneck(int64_t in_planes, int64_t planes, int64_t stride, DType dtype, bool gluon_v1) {
  const int64_t out = planes * expansion;
  const int64_t stride1 = gluon_v1 ? stride : 1, stride2 = gluon_v1 ? 1 : stride;
  conv1 = register_module("conv1", std::make_shared<Conv2d>(in_planes, planes, 1, stride1, 0, gluon_v1, dtype));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(planes, 1e-5, 0.1, dtype));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(planes, planes, 3, stride2, 1, /*bias=*/false, dtype));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes, 1e-5, 0.1, dtype));
  conv3 = register_module("conv3", std::make_shared<Conv2d>(planes, out, 1, 1, 0, gluon_v1, dtype));
  bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(out, 1e-5, 0.1, dtype));
  if (stride != 1 || in_planes != out)
    downsample = register_module("downsample", make_downsample(in_planes, out, stride, dtype));
}

// relu(bn3(conv3(relu(bn2(conv2(relu(bn1(conv1(x)))))))) + shortcut(x))
Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = bn1->forward_relu(*conv1, x);
  y = bn2->forward_relu(*conv2, y);
  return bn3->forward_add_relu(*conv3, y, downsample ? (*downsample)(x) : x);
}

// MXNet's resnet.py batch norms: eps 2e-5, momentum 0.9 (0.1 here).
constexpr double kPreActEps = 2e-5;

PreActBlock::PreActBlock(int64_t in_planes, int64_t planes, int64_t stride, bool bottleneck, bool projection,
                         DType dtype) {
  const int64_t out = bottleneck ? planes * Bottleneck::expansion : planes;
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(in_planes, kPreActEps, 0.1, dtype));
  if (bottleneck) {
    conv1 = register_module("conv1", std::make_shared<Conv2d>(in_planes, planes, 1, 1, 0, false, dtype));
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes, kPreActEps, 0.1, dtype));
    conv2 = register_module("conv2", std::make_shared<Conv2d>(planes, planes, 3, stride, 1, false, dtype));
    bn3 = register_module("bn3", std::make_shared<BatchNorm2d>(planes, kPreActEps, 0.1, dtype));
    conv3 = register_module("conv3", std::make_shared<Conv2d>(planes, out, 1, 1, 0, false, dtype));
  } else {
    conv1 = register_module("conv1", std::make_shared<Conv2d>(in_planes, planes, 3, stride, 1, false, dtype));
    bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(planes, kPreActEps, 0.1, dtype));
    conv2 = register_module("conv2", std::make_shared<Conv2d>(planes, planes, 3, 1, 1, false, dtype));
  }
  if (projection)
    shortcut = register_module("shortcut", std::make_shared<Conv2d>(in_planes, out, 1, stride, 0, false, dtype));
}

// a = relu(bn1(x)); F = conv2(relu(bn2(conv1(a)))) or, bottleneck,
// conv3(relu(bn3(conv2(relu(bn2(conv1(a))))))); x + F, or shortcut(a) + F.
Tensor PreActBlock::forward(const Tensor& x) {
  const Tensor a = bn1->forward_relu(x);
  Tensor y = bn2->forward_relu(*conv1, a);
  y = bn3 ? (*conv3)(bn3->forward_relu(*conv2, y)) : (*conv2)(y);
  return ops::add(y, shortcut ? (*shortcut)(a) : x);
}

ResNet::ResNet(const ResNetConfig& cfg, Generator& gen) : config_(cfg) {
  const bool cifar = is_cifar_depth(cfg.num_layers);
  EMBER_CHECK(cifar || is_imagenet_depth(cfg.num_layers), "resnet: --num-layers ", cfg.num_layers,
              " is not a ResNet depth (ImageNet-style 18, 34, 50, 101, 152; CIFAR-style 6n+2: 20, 32, 44, 56, 110)");
  EMBER_CHECK(cfg.num_classes > 0 && cfg.in_channels > 0 && cfg.image_size > 0, "resnet: bad config");
  const DType dt = cfg.dtype;
  EMBER_CHECK(cfg.stem_kernel == 0 || cfg.stem_kernel == 3 || cfg.stem_kernel == 7, "resnet: stem kernel ",
              cfg.stem_kernel, " is not 3 or 7");
  EMBER_CHECK(cfg.width >= 0, "resnet: negative width ", cfg.width);
  const bool small_stem = cifar || (cfg.stem_kernel == 0 ? cfg.image_size <= 32 : cfg.stem_kernel == 3);
  const int64_t stem_width = cfg.width > 0 ? cfg.width : (cifar ? 16 : 64);
  const bool preact = cfg.variant == ResNetVariant::mxnet_preact;
  EMBER_CHECK(!(preact && cfg.zero_init_residual), "resnet: --zero-init-residual needs a batch norm at the end of each "
              "block, which the pre-activation units of mxnet-preact do not have");
  const bool gluon_v1 = cfg.variant == ResNetVariant::gluon_v1;
  const double bn_eps = preact ? kPreActEps : 1e-5;
  if (preact)
    input_bn = register_module("input_bn",
                               std::make_shared<BatchNorm2d>(cfg.in_channels, kPreActEps, 0.1, dt, /*fixed_gamma=*/true));
  if (small_stem) {
    conv1 = register_module(
        "conv1", std::make_shared<Conv2d>(cfg.in_channels, stem_width, 3, 1, 1, /*bias=*/false, dt));
  } else {
    conv1 = register_module(
        "conv1", std::make_shared<Conv2d>(cfg.in_channels, stem_width, 7, 2, 3, /*bias=*/false, dt));
  }
  // MXNet's pre-activation 3x3 stem goes straight into the units.
  if (!(preact && small_stem)) bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(stem_width, bn_eps, 0.1, dt));
  if (!small_stem) maxpool = std::make_shared<MaxPool2d>(3, 2, 1);

  int64_t in_planes = stem_width;
  auto add_stage = [&](int index, int blocks, int64_t planes, int64_t stride, bool bottleneck) {
    auto stage = std::make_shared<Sequential>();
    for (int b = 0; b < blocks; ++b) {
      const int64_t s = b == 0 ? stride : 1;
      if (preact) {
        // resnet.py projects in the first unit of every stage, even where the shape stays.
        stage->append(std::make_shared<PreActBlock>(in_planes, planes, s, bottleneck, /*projection=*/b == 0, dt));
        in_planes = bottleneck ? planes * Bottleneck::expansion : planes;
      } else if (bottleneck) {
        stage->append(std::make_shared<Bottleneck>(in_planes, planes, s, dt, gluon_v1));
        in_planes = planes * Bottleneck::expansion;
      } else {
        stage->append(std::make_shared<BasicBlock>(in_planes, planes, s, dt));
        in_planes = planes;
      }
    }
    layers.push_back(register_module("layer" + std::to_string(index), stage));
  };
  if (cifar) {
    const int n = (cfg.num_layers - 2) / 6;
    add_stage(1, n, stem_width, 1, false);
    add_stage(2, n, 2 * stem_width, 2, false);
    add_stage(3, n, 4 * stem_width, 2, false);
  } else {
    const auto stages = imagenet_stages(cfg.num_layers);
    const bool bottleneck = cfg.num_layers >= 50;
    const int64_t widths[4] = {stem_width, 2 * stem_width, 4 * stem_width, 8 * stem_width};
    for (int i = 0; i < 4; ++i) add_stage(i + 1, stages[size_t(i)], widths[i], i == 0 ? 1 : 2, bottleneck);
  }
  if (preact) final_bn = register_module("final_bn", std::make_shared<BatchNorm2d>(in_planes, kPreActEps, 0.1, dt));
  EMBER_CHECK(cfg.pool == HeadPool::avg || cfg.pool == HeadPool::concat, "resnet: unknown head pool ", int(cfg.pool));
  const int64_t features = cfg.pool == HeadPool::concat ? 2 * in_planes : in_planes;
  if (cfg.dropout > 0) dropout = register_module("dropout", std::make_shared<Dropout>(cfg.dropout));
  fc = register_module("fc", std::make_shared<Linear>(features, cfg.num_classes, /*bias=*/true, dt));

  // torchvision's initialisation, in registration order so a seed fixes the model.
  for (auto& p : named_parameters()) {
    const std::string& name = p.name;
    if (name.rfind("fc.", 0) == 0) {
      default_uniform_(*p.tensor, features, gen);
    } else if (p.tensor->ndim() == 4) {
      kaiming_normal_(*p.tensor, FanMode::fan_out, gen);
    }  // BN weight = 1, bias = 0 from construction
  }
  if (cfg.zero_init_residual) {
    for (auto& stage : layers)
      for (size_t b = 0; b < stage->size(); ++b) {
        Module& block = (*stage)[b];
        if (auto* basic = dynamic_cast<BasicBlock*>(&block)) basic->bn2->weight.zero_();
        if (auto* bottle = dynamic_cast<Bottleneck*>(&block)) bottle->bn3->weight.zero_();
      }
  }
  parameter_count_ = parameter_count();
}

Tensor ResNet::forward(const Tensor& input) {
  Tensor x = input;
  // The stem's weight says the compute dtype (f16 or bf16 after net::convert_to_half).
  if (x.dtype() == DType::u8) x = ops::normalize_u8(x, config_.input_norm, conv1->weight.dtype());
  if (input_bn) x = (*input_bn)(x);
  x = bn1 ? bn1->forward_relu(*conv1, x) : (*conv1)(x);
  if (maxpool) x = (*maxpool)(x);
  for (auto& stage : layers) x = (*stage)(x);
  if (final_bn) x = final_bn->forward_relu(x);
  Tensor features = ops::flatten(ops::adaptive_avg_pool2d(x, 1, 1), 1);  // [N, C]
  if (config_.pool == HeadPool::concat)
    features = ops::concat(features, ops::flatten(ops::global_max_pool2d(x), 1), 1);  // [N, 2C]: avg, then max
  if (dropout) features = (*dropout)(features);
  return (*fc)(features);
}

std::string ResNet::describe() const {
  char buf[200];
  const bool cifar = is_cifar_depth(config_.num_layers);
  const std::string drop = dropout ? cat(", dropout ", config_.dropout) : std::string();
  const std::string variant =
      config_.variant == ResNetVariant::torchvision ? std::string() : cat(", ", resnet_variant_name(config_.variant));
  std::snprintf(buf, sizeof(buf), "resnet-%d (%s%s%s%s%s, %.2fM parameters)", config_.num_layers,
                cifar ? "CIFAR-style" : (config_.num_layers >= 50 ? "ImageNet-style, bottleneck" : "ImageNet-style"),
                variant.c_str(),
                !cifar && !maxpool ? ", 3x3 stem for small input" : "",
                config_.pool == HeadPool::concat ? ", concat pool" : "", drop.c_str(), double(parameter_count_) / 1e6);
  return buf;
}

}  // namespace ember::net
