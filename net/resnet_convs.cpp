// net/resnet_convs.cpp — the distinct convolutions of a ResNet, counted
// (see resnet_convs.h).
#include "net/resnet_convs.h"

#include <map>
#include <tuple>

#include "engine/error.h"

namespace ember::net {

std::vector<ConvUse> resnet_convs(int depth, int64_t N, int64_t size, int64_t in_channels) {
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, ConvUse> uses;  // C, H, K, R, stride, pad
  auto conv = [&](int64_t C, int64_t H, int64_t K, int64_t R, int64_t stride) {
    const int64_t pad = R / 2;
    ConvUse& u = uses[{C, H, K, R, stride, pad}];
    if (u.count++ == 0) u.g = make_conv2d_geometry(N, C, H, H, K, R, R, stride, stride, pad, pad);
    return u.g.P;
  };
  if ((depth - 2) % 6 == 0 && depth != 50 && depth >= 8) {  // CIFAR-style (He et al. 2016, section 4.2): 3 stages of (depth-2)/6 basic blocks
    int64_t H = conv(in_channels, size, 16, 3, 1);
    int64_t C = 16;
    for (int stage = 0; stage < 3; ++stage) {
      const int64_t width = 16 << stage;
      for (int b = 0; b < (depth - 2) / 6; ++b) {
        const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
        const int64_t Ho = conv(C, H, width, 3, stride);
        conv(width, Ho, width, 3, 1);
        if (stride != 1 || C != width) conv(C, H, width, 1, stride);
        C = width, H = Ho;
      }
    }
  } else {  // torchvision
    std::vector<int> blocks;
    bool bottleneck = depth >= 50;
    switch (depth) {
      case 18: blocks = {2, 2, 2, 2}; break;
      case 34: case 50: blocks = {3, 4, 6, 3}; break;
      case 101: blocks = {3, 4, 23, 3}; break;
      case 152: blocks = {3, 8, 36, 3}; break;
      default: fail(cat("--num-layers must be 18, 34, 50, 101, 152 or 6n+2 (CIFAR style: 20, 32, 56, ...), got ", depth));
    }
    int64_t H = conv(in_channels, size, 64, 7, 2);
    H = (H + 2 - 3) / 2 + 1;  // max pool 3x3 stride 2 pad 1
    int64_t C = 64;
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t width = 64 << stage, out = bottleneck ? width * 4 : width;
      for (int b = 0; b < blocks[size_t(stage)]; ++b) {
        const int64_t stride = stage > 0 && b == 0 ? 2 : 1;
        int64_t Ho;
        if (bottleneck) {
          conv(C, H, width, 1, 1);
          Ho = conv(width, H, width, 3, stride);
          conv(width, Ho, out, 1, 1);
        } else {
          Ho = conv(C, H, width, 3, stride);
          conv(width, Ho, out, 3, 1);
        }
        if (stride != 1 || C != out) conv(C, H, out, 1, stride);
        C = out, H = Ho;
      }
    }
  }
  std::vector<ConvUse> list;
  for (auto& [key, u] : uses) list.push_back(u);
  return list;
}

}  // namespace ember::net
