// tests/cuda/test_cuda_step_launches.cpp — what one training step of fit()
// puts on the device, for ResNet-50's structure: kernel launches, library
// calls, copies and host waits (engine/device_work.h), in f32, fp16 and bf16. A step's cost is the difference between an epoch of 4
// steps and one of 2, halved, so that per-run work (converting the model,
// the epoch's reads) cancels. The model is ResNet-50 narrowed to width 4 on
// 10x10 images, batch 4: the same layers, so the same launches, as at full
// size. Channels-last (--layout nhwc) is counted too, where 16-bit
// convolutions take the statistics of the batch norm after them.
#include <cstdio>

#include "apps/training/fit.h"
#include "engine/device_work.h"
#include "net/resnet.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

net::ResNetConfig resnet50_narrow() {
  net::ResNetConfig c = testing::tiny_resnet_config(DType::f32);
  c.num_layers = 50;
  c.width = 4;
  c.stem_kernel = 7;
  return c;
}

// The blocks' convolution -> batch norm pairs whose channels (in and out)
// are multiples of 8: in 16-bit channels-last training, the tensor-core
// convolution takes batch norm's statistics, and the statistics pass is
// one launch fewer each (cuda/kernels/conv_batch_norm.cu).
int64_t fusable_conv_batch_norm_pairs() {
  Generator gen(3);
  net::ResNet model(resnet50_narrow(), gen);
  int64_t pairs = 0;
  const auto count = [&](const std::shared_ptr<net::Conv2d>& conv) {
    pairs += conv && conv->weight.size(0) % 8 == 0 && conv->weight.size(1) % 8 == 0;
  };
  model.apply([&](net::Module& m) {
    if (auto* b = dynamic_cast<net::BasicBlock*>(&m)) count(b->conv1), count(b->conv2);
    if (auto* b = dynamic_cast<net::Bottleneck*>(&m)) count(b->conv1), count(b->conv2), count(b->conv3);
  });
  return pairs;
}

DeviceWorkCounts fit_cost(int64_t images, DType precision, MemoryFormat format) {
  const data::ImageSet set = data::subset(testing::separable_image_set(), 0, images);
  Generator gen(3);
  net::ResNet model(resnet50_narrow(), gen);
  model.to(Device::cuda(0));
  model.to_memory_format(format);
  data::BatchIterator::Options io;
  io.batch_size = 4;
  data::BatchIterator it(set, io);
  apps::FitOptions fo;
  fo.num_epochs = 1;
  fo.lr = 0.05;
  fo.device = Device::cuda(0);
  fo.precision = precision;
  fo.disp_batches = 1000;
  fo.log = std::fopen("/dev/null", "w");
  const DeviceWorkCounts before = device_work_counts();
  const apps::FitResult r = apps::fit(model, it, nullptr, fo);
  const DeviceWorkCounts cost = device_work_counts() - before;
  std::fclose(fo.log);
  REQUIRE(r.steps == images / 4);
  return cost;
}

DeviceWorkCounts per_step(DType precision, MemoryFormat format = MemoryFormat::contiguous) {
  const DeviceWorkCounts d = fit_cost(16, precision, format) - fit_cost(8, precision, format);
  CHECK(d.kernels % 2 == 0);
  CHECK(d.copies % 2 == 0);
  return {d.kernels / 2, d.library_calls / 2, d.copies / 2, d.host_waits / 2};
}

}  // namespace

TEST_CASE("cuda step launches: a ResNet-50 training step in f32, fp16 and bf16 (launches and host waits)" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  DeviceWorkCounts f32;
  for (const DType precision : {DType::f32, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(precision));
    const DeviceWorkCounts s = per_step(precision);
    MESSAGE("ResNet-50 step, " << dtype_name(precision) << ": " << s.launches() << " launches (" << s.kernels
                               << " kernels, " << s.library_calls << " library calls, " << s.copies << " copies), "
                               << s.host_waits << " host waits");
    CHECK(s.host_waits == 0);
    // The batch's images and labels, the optimizer's plan when a gradient moved: no copy per parameter
    // (backward keeps each fresh gradient, engine/autograd.cpp).
    CHECK(s.copies <= 4);
    if (precision == DType::f32) {
      f32 = s;
    } else {  // the mixed-precision step is three launches for the whole model (unscale, SGD, the scaler)
      CHECK(s.launches() <= f32.launches() + 2);
      // at most a third of the 1329 launches of an fp16 step with the optimizer on the host
      // (docs/benchmarks.md, "Launches per ResNet-50 step")
      CHECK(s.launches() <= 1329 / 3);
    }
  }
}

TEST_CASE("cuda step launches: a channels-last ResNet-50 step adds only the input's and the head's conversions" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (const DType precision : {DType::f32, DType::f16}) {
    CAPTURE(dtype_name(precision));
    const DeviceWorkCounts nchw = per_step(precision), nhwc = per_step(precision, MemoryFormat::channels_last);
    MESSAGE("channels-last ResNet-50 step, " << dtype_name(precision) << ": " << nhwc.launches() << " launches ("
                                             << nhwc.kernels << " kernels), " << nhwc.host_waits
                                             << " host waits; NCHW " << nchw.launches());
    CHECK(nhwc.host_waits == 0);
    CHECK(nhwc.copies == nchw.copies);
    // The stem's image batch to NHWC (forward), the head's average pool input
    // to NCHW (forward and backward): three transposes, nothing per layer.
    // In f16 the convolutions differ too: channels-last ones run on mma.sync
    // (cuda/kernels/conv_mma.cu), whose data gradient takes a strided
    // layer's 4 phases in one launch where NCHW's GEMMs take 4, and whose
    // epilogue takes the statistics of the batch norm after it (no
    // statistics pass), so the step launches fewer kernels; a conversion per
    // layer would add over 50.
    if (precision == DType::f32) {
      CHECK(nhwc.launches() == nchw.launches() + 3);
    } else {
      const int64_t pairs = fusable_conv_batch_norm_pairs();
      MESSAGE(pairs << " convolution -> batch norm pairs take the statistics in the convolution");
      CHECK(pairs >= 30);
      CHECK(nhwc.launches() <= nchw.launches() + 3 - pairs);
    }
    if (precision == DType::f16) CHECK(nhwc.launches() <= 1329 / 3);
  }
}
