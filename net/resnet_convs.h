// net/resnet_convs.h — the distinct convolutions of a ResNet and how many
// times one forward pass uses each: what the convolution benchmarks
// (apps/bench/bench_conv.cpp on the CPU, bench_conv_cuda.cpp against cuDNN)
// time layer by layer and weight by use. Built from the architecture alone
// (no model, no weights).
#pragma once
#include <cstdint>
#include <vector>

#include "ops/kernels.h"

namespace ember::net {

struct ConvUse {
  Conv2dGeometry g;  // NCHW; set channels_last for the other layout
  int count = 0;
};

// torchvision's ResNets (depth 18/34 with basic blocks, 50/101/152 with
// bottlenecks, the stride on the 3x3) or the CIFAR-style 6n+2 ones, on
// batch N of size x size images with in_channels channels. Errors on any
// other depth.
std::vector<ConvUse> resnet_convs(int depth, int64_t N, int64_t size, int64_t in_channels);

}  // namespace ember::net
