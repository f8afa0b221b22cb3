// tests/cuda/test_cuda_graph_step.cpp — a training step replayed as a CUDA
// graph (--cuda-graph 1, apps/training/step_graph.h): fit() and the
// benchmark train to the values of the eager run, in f32 and fp16, with a
// short last batch run eagerly between replays; a replayed step is one
// graph launch plus the batch's and the hyperparameters' small transfers,
// and no host wait; the graph's private pool keeps its blocks from the
// shared cache; a host-to-device copy inside a capture is refused. Runs on
// the emulator (build/test_sim) and on a GPU (build/test_ember).
#include <cstdio>
#include <vector>

#include "apps/training/fit.h"
#include "apps/training/step_graph.h"
#include "cuda/allocator.h"
#include "engine/device_graph.h"
#include "engine/device_work.h"
#include "net/resnet.h"
#include "ops/ops.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;

struct Trained {
  std::vector<std::vector<double>> params, buffers;
  apps::FitResult result;
  DeviceWorkCounts work;
};

// ResNet-8 after one epoch of fit() over `images` separable images, batch 8.
Trained train(bool cuda_graph, DType precision, int64_t images, MemoryFormat format = MemoryFormat::contiguous) {
  net::ResNetConfig c = testing::tiny_resnet_config(DType::f32);
  Generator gen(17);
  net::ResNet model(c, gen);
  model.to(Device::cuda(0));
  model.to_memory_format(format);
  const data::ImageSet set = data::subset(testing::separable_image_set(), 0, images);
  data::BatchIterator::Options io;
  io.batch_size = 8;
  data::BatchIterator it(set, io);
  apps::FitOptions fo;
  fo.num_epochs = 1;
  fo.lr = 0.05;
  fo.schedule.kind = net::LrScheduleKind::onecycle;  // lr and momentum change every step
  fo.schedule.cycle_momentum = true;
  fo.device = Device::cuda(0);
  fo.precision = precision;
  fo.cuda_graph = cuda_graph;
  fo.disp_batches = 1000;
  fo.log = std::fopen("/dev/null", "w");
  const DeviceWorkCounts before = device_work_counts();
  Trained t;
  t.result = apps::fit(model, it, nullptr, fo);
  t.work = device_work_counts() - before;
  std::fclose(fo.log);
  for (auto& p : model.named_parameters()) t.params.push_back(p.tensor->to_double_vector());
  for (auto& b : model.named_buffers()) t.buffers.push_back(b.tensor->to_double_vector());
  return t;
}

}  // namespace

TEST_CASE("cuda graph step: fit() with --cuda-graph 1 trains to the eager run's values, f32 and fp16" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (const DType precision : {DType::f32, DType::f16}) {
    for (const int64_t images : {int64_t(48), int64_t(44)}) {  // 6 full batches; 5 and a short one
      CAPTURE(dtype_name(precision));
      CAPTURE(images);
      const Trained eager = train(false, precision, images), graph = train(true, precision, images);
      REQUIRE(graph.result.steps == eager.result.steps);
      // The gradients are added into zeroed buffers instead of taken as they
      // come: the same values (0 + g == g), a zero's sign aside, which == ignores.
      CHECK(graph.params == eager.params);
      CHECK(graph.buffers == eager.buffers);  // running statistics and num_batches_tracked
      CHECK(graph.result.train_accuracy == eager.result.train_accuracy);
      CHECK(graph.result.loss_scale == eager.result.loss_scale);
      CHECK(graph.work.host_waits == eager.work.host_waits);
      // every full step but the first (eager) is a graph launch; the short one runs eagerly
      CHECK(graph.work.graphs == images / 8 - 1);
      MESSAGE(dtype_name(precision) << ", " << images << " images: eager " << eager.work.launches()
                                    << " launches, graph " << graph.work.launches() << " (" << graph.work.graphs
                                    << " graph launches)");
    }
  }
  // Channels-last too.
  const Trained eager = train(false, DType::f32, 48, MemoryFormat::channels_last);
  const Trained graph = train(true, DType::f32, 48, MemoryFormat::channels_last);
  CHECK(graph.params == eager.params);
}

TEST_CASE("cuda graph step: a replayed step is one graph launch and the batch's transfers, no host wait" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  // A step's cost: an epoch of 6 steps minus one of 2, over 4 (both capture on their second step).
  const Trained a = train(true, DType::f16, 48), b = train(true, DType::f16, 16);
  const DeviceWorkCounts d = a.work - b.work;
  MESSAGE("a replayed fp16 step: " << double(d.launches()) / 4 << " launches (" << double(d.graphs) / 4 << " graph, "
                                   << double(d.kernels) / 4 << " kernels, " << double(d.copies) / 4 << " copies), "
                                   << double(d.host_waits) / 4 << " host waits");
  CHECK(d.graphs == 4);
  CHECK(d.host_waits == 0);
  // lr and momentum (two fills), the batch into the graph's buffers (two
  // copies), its upload (two copies): six transfers and the graph.
  CHECK(d.launches() <= 4 * 7);
}

TEST_CASE("cuda graph step: the benchmark replays one graph per step" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (const DType precision : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(precision));
    net::ResNetConfig c = testing::tiny_resnet_config(DType::f32);
    Generator gen(5);
    net::ResNet model(c, gen);
    model.to(Device::cuda(0));
    apps::BenchmarkOptions o;
    o.batch_size = 4;
    o.channels = 1, o.height = 10, o.width = 10, o.num_classes = 5;
    o.batches = 4;
    o.disp_batches = 2;
    o.device = Device::cuda(0);
    o.precision = precision;
    o.cuda_graph = true;
    o.log = std::fopen("/dev/null", "w");
    const apps::BenchmarkResult r = apps::benchmark(model, o);
    std::fclose(o.log);
    CHECK(r.timed_steps == 4);
    CHECK(r.step_work.graphs == 4);
    CHECK(r.step_work.launches() == 4);  // nothing else: the inputs and the lr are fixed
    CHECK(r.step_work.host_waits == 0);
  }
}

TEST_CASE("cuda graph: a private pool's blocks return to it, never to the shared cache" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  cuda::DevicePrivatePool pool;
  void* p = nullptr;
  {
    const cuda::ActivePrivatePool active(pool);
    p = cuda::device_allocate(3000);
    CHECK(pool.bytes() >= 3000);
    CHECK(testing::thrown_message([&] { const cuda::ActivePrivatePool again(pool); }).find("already active") !=
          std::string::npos);
  }
  cuda::device_deallocate(p, 3000);  // back to the pool, though no pool is active now
  void* q = cuda::device_allocate(3000);  // the shared cache: never the pool's block
  CHECK(q != p);
  cuda::device_deallocate(q, 3000);
  {
    const cuda::ActivePrivatePool active(pool);
    void* r = cuda::device_allocate(3000);  // the pool's own block again
    CHECK(r == p);
    cuda::device_deallocate(r, 3000);
  }
}

TEST_CASE("cuda graph: a host-to-device copy inside a capture is refused and the capture dropped" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const Device gpu = Device::cuda(0);
  const std::string message = testing::thrown_message([&] {
    capture_device_graph(gpu, [&] { (void)Tensor::from_vector({1, 2, 3}, {3}, DType::f32, gpu); });
  });
  CHECK(message.find("a host-to-device copy of 12 bytes inside a captured CUDA graph") != std::string::npos);
  // The stream works as before, and a good capture replays.
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, DType::f32, gpu), y = Tensor::zeros({3}, DType::f32, gpu);
  const std::unique_ptr<DeviceGraph> graph = capture_device_graph(gpu, [&] { ops::add_(y, x, 2.0); });
  CHECK(y.to_double_vector() == std::vector<double>{0, 0, 0});  // captured, not run
  graph->replay();
  graph->replay();
  CHECK(y.to_double_vector() == std::vector<double>{4, 8, 12});
  CHECK(graph->nodes() == 1);
  CHECK(testing::thrown_message([] { capture_device_graph(Device::cpu(), [] {}); }).find("the CPU runs its work") !=
        std::string::npos);
}
