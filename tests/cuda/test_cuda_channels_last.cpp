// tests/cuda/test_cuda_channels_last.cpp — channels-last training on the
// device: a ResNet-8 whose weights (and so activations) are channels-last
// trains through fit() to the weights the NCHW model reaches on the device
// and on the CPU (the same arithmetic in another memory order: equal to
// rounding), in f32 and fp16, and its parameters stay channels-last. The
// single kernels are checked in tests/ops/test_ops.cpp (the harness's
// channels-last cases) and tests/cuda/test_cuda_kernels.cpp (transpose).
// Runs on the emulator (build/test_sim) and on a GPU (build/test_ember).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "apps/training/fit.h"
#include "net/resnet.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

// ResNet-8 after one epoch of fit() (6 steps of 8 images) on `device` in `format`.
std::vector<std::vector<double>> trained_weights(Device device, MemoryFormat format, DType precision,
                                                 std::vector<bool>* channels_last = nullptr, int64_t images = 48) {
  net::ResNetConfig c = testing::tiny_resnet_config(DType::f32);
  Generator gen(11);
  net::ResNet model(c, gen);
  model.to(device);
  model.to_memory_format(format);
  const data::ImageSet set = data::subset(testing::separable_image_set(), 0, images);  // read in place
  data::BatchIterator::Options io;
  io.batch_size = 8;
  data::BatchIterator it(set, io);
  apps::FitOptions fo;
  fo.num_epochs = 1;
  fo.lr = 0.05;
  fo.device = device;
  fo.precision = precision;
  fo.disp_batches = 1000;
  fo.log = std::fopen("/dev/null", "w");
  const apps::FitResult r = apps::fit(model, it, nullptr, fo);
  std::fclose(fo.log);
  REQUIRE(r.steps == images / 8);
  std::vector<std::vector<double>> out;
  for (auto& p : model.named_parameters()) {
    out.push_back(p.tensor->to_double_vector());  // logical order whatever the format
    if (channels_last) channels_last->push_back(p.tensor->is_channels_last());
  }
  return out;
}

// max |a - b| over max(1, max |b|), over every parameter.
double worst_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    REQUIRE(a[i].size() == b[i].size());
    double scale = 1, diff = 0;
    for (size_t j = 0; j < a[i].size(); ++j) {
      scale = std::max(scale, std::fabs(b[i][j]));
      diff = std::max(diff, std::fabs(a[i][j] - b[i][j]));
    }
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

}  // namespace

TEST_CASE("cuda channels-last: fit() trains ResNet-8 to the NCHW model's weights, on the device and the CPU" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const Device gpu = Device::cuda(0);
  std::vector<bool> cl;
  const auto nhwc = trained_weights(gpu, MemoryFormat::channels_last, DType::f32, &cl);
  const auto nchw = trained_weights(gpu, MemoryFormat::contiguous, DType::f32);
  const auto cpu = trained_weights(Device::cpu(), MemoryFormat::contiguous, DType::f32);
  // Convolution weights are the 4-D parameters: channels-last after training; the rest stay as they were.
  int four_d = 0;
  for (bool b : cl) four_d += b;
  CHECK(four_d == 9);  // ResNet-8: the stem and 3 stages of one basic block (2 convs), two with a 1x1 downsample
  const double vs_nchw = worst_difference(nhwc, nchw), vs_cpu = worst_difference(nhwc, cpu);
  MESSAGE("f32: channels-last vs NCHW on the device " << vs_nchw << ", vs the CPU " << vs_cpu);
  CHECK(vs_nchw < 1e-5);
  CHECK(vs_cpu < 1e-5);
  // The same run again gives the same bits (no race, no order that depends on timing).
  CHECK(worst_difference(nhwc, trained_weights(gpu, MemoryFormat::channels_last, DType::f32)) == 0);

  // fp16 (f32 masters, loss scaling): the 16-bit roundings land in other
  // places of the sums, so the weights agree to fp16's precision after the
  // first real step (2 steps: the first is skipped at the initial loss
  // scale). Later steps amplify those last-bit differences, in NCHW between
  // the CPU and the device as much (0.16 of the weights' scale after 6 steps).
  const double half = worst_difference(trained_weights(gpu, MemoryFormat::channels_last, DType::f16, nullptr, 16),
                                       trained_weights(gpu, MemoryFormat::contiguous, DType::f16, nullptr, 16));
  MESSAGE("fp16: channels-last vs NCHW on the device " << half);
  CHECK(half < 5e-3);
}
