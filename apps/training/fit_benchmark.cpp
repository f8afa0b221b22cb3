// apps/training/fit_benchmark.cpp — the synthetic-data step benchmark
// (--benchmark 1, eager or --cuda-graph 1) and the loader-only run
// (--test-io 1) of the training apps.
#include <algorithm>

#include "apps/training/fit.h"
#include "apps/training/fit_helpers.h"
#include "apps/training/step_graph.h"
#include "engine/autograd.h"
#include "net/dist/data_parallel.h"
#include "ops/kernel_profile.h"

namespace ember::apps {

using detail::Clock;
using detail::Interval;
using detail::seconds_since;
using detail::unit_loss_scale;

BenchmarkResult benchmark(net::Module& model, const BenchmarkOptions& o) {
  EMBER_CHECK(o.batches > 0 && o.disp_batches > 0, "benchmark: need positive batch counts");
  // Fixed synthetic batch: random pixels and labels, as MXNet's --benchmark.
  Tensor images = Tensor::empty({o.batch_size, o.channels, o.height, o.width}, DType::u8);
  Tensor labels = Tensor::empty({o.batch_size}, DType::i64);
  PhiloxStream rng(o.seed, 0x5eed);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = uint8_t(rng.next_u32());
  for (int64_t i = 0; i < o.batch_size; ++i) labels.data<int64_t>()[i] = int64_t(rng.below(uint64_t(o.num_classes)));
  const Tensor x = images.to(o.device), y = labels.to(o.device);

  EMBER_CHECK(o.precision == DType::f32 || is_16bit_float(o.precision), "--precision: fp32, fp16 or bf16, got ",
              dtype_name(o.precision));
  const bool mixed = is_16bit_float(o.precision);
  net::dist::Comm* comm = o.comm && o.comm->world_size() > 1 ? o.comm : nullptr;
  const int world = comm ? comm->world_size() : 1;
  if (comm) net::dist::broadcast_module(*comm, model);
  net::SGD opt(model.named_parameters(), o.sgd, mixed ? net::convert_to_half(model, o.precision) : net::Masters{});
  std::unique_ptr<net::dist::Reducer> reducer;
  if (comm) {
    reducer = std::make_unique<net::dist::Reducer>(*comm, model.named_parameters(), o.buckets);
    std::fprintf(o.log, "Data-parallel: %d ranks over %s, %s\n", world, comm->backend(), reducer->describe().c_str());
  }
  net::LossScaler scaler(o.precision == DType::f16 ? net::LossScalerOptions{} : unit_loss_scale({}), o.device);
  model.train();
  // --cuda-graph 1: the steps after the first replay the second, captured
  // (apps/training/step_graph.h); x and y are the graph's fixed inputs.
  std::unique_ptr<StepGraph> graph;
  Tensor graph_loss;  // the captured step's loss, rewritten by every replay
  if (o.cuda_graph) {
    EMBER_CHECK(!comm, "--cuda-graph 1 runs one process; data-parallel runs are not captured");
    graph = std::make_unique<StepGraph>(model, opt, o.device);
    opt.write_hyperparameters(o.lr, o.sgd.momentum);
  }
  auto graph_body = [&] {
    graph_loss = ops::cross_entropy(model(x), y);
    graph->zero_grads();
    if (mixed) {
      graph_loss.backward(scaler.seed(graph_loss));
      opt.step_scaled(o.lr, scaler);
    } else {
      graph_loss.backward(graph->unit_seed());
      opt.step(o.lr);
    }
  };
  // One step, queued: the host waits for the device only at the end of an
  // interval (as a GPU training step never waits; fit.h).
  auto eager_step = [&] {
    const Tensor loss = ops::cross_entropy(model(x), y);
    opt.zero_grad();
    if (reducer) reducer->prepare();
    if (mixed) {
      loss.backward(scaler.seed(loss));
      if (reducer) reducer->finish();
      opt.step_scaled(o.lr, scaler);
    } else {
      loss.backward();
      if (reducer) reducer->finish();
      opt.step(o.lr);
    }
    return loss;
  };
  auto step = [&] {
    if (!graph) return eager_step();
    graph->run(graph_body, [] {});
    return graph_loss;
  };
  for (int i = 0; i < o.warmup_batches; ++i) (void)step().item();
  reset_kernel_profile();  // a --profile table covers the timed steps only
  if (reducer) reducer->reset_stats();
  std::vector<double> speeds;
  BenchmarkResult r;
  for (int done = 0; done < o.batches;) {
    const int n = std::min(o.disp_batches, o.batches - done);
    const auto t0 = Clock::now();
    const DeviceWorkCounts work_before = device_work_counts();
    Tensor loss;
    for (int i = 0; i < n; ++i) loss = step();
    const DeviceWorkCounts work = device_work_counts() - work_before;
    r.step_work = {r.step_work.kernels + work.kernels, r.step_work.library_calls + work.library_calls,
                   r.step_work.copies + work.copies, r.step_work.host_waits + work.host_waits,
                   r.step_work.graphs + work.graphs};
    r.timed_steps += n;
    (void)loss.item();  // wait for the interval's steps to finish (a device sync on GPUs)
    const double speed = double(n) * double(o.batch_size) * double(world) / seconds_since(t0);
    speeds.push_back(speed);
    std::fprintf(o.log, "Batch [%d-%d]\tSpeed: %.2f samples/sec\n", done, done + n, speed);
    std::fflush(o.log);
    done += n;
  }
  if (mixed) scaler.check_divergence(scaler.read());
  std::sort(speeds.begin(), speeds.end());
  r.median_speed = speeds[speeds.size() / 2];
  if (reducer) r.comm = reducer->stats();
  return r;
}

TestIoResult test_io(BatchSource& source, int epochs, int disp_batches, std::FILE* log) {
  EMBER_CHECK(epochs > 0 && disp_batches > 0, "test-io: need positive epochs and --disp-batches");
  std::vector<double> speeds;
  TestIoResult result;
  int64_t steady_samples = 0;
  double steady_seconds = 0;
  data::Batch b;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    source.start_epoch(epoch);
    if (const int size = source.image_size(epoch); size > 0 && (epoch == 0 || size != source.image_size(epoch - 1)))
      std::fprintf(log, "Epoch[%d] Image size=%d\n", epoch, size);
    Interval interval;
    int64_t batch_index = 0, samples = 0;
    while (source.next(b)) {
      interval.samples += b.size;
      samples += b.size;
      ++interval.batches;
      if (++batch_index % disp_batches == 0) {
        const double speed = double(interval.samples) / seconds_since(interval.start);
        speeds.push_back(speed);
        std::fprintf(log, "Epoch[%d] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\n", epoch,
                     (long long)(batch_index - interval.batches), (long long)batch_index, speed);
        std::fflush(log);
        interval.reset();
      }
    }
    const double seconds = seconds_since(epoch_start);
    std::fprintf(log, "Epoch[%d] Time cost=%.3f\t%lld samples, %.2f samples/sec\n", epoch, seconds, (long long)samples,
                 double(samples) / seconds);
    if (epoch > 0 || epochs == 1) steady_samples += samples, steady_seconds += seconds;
  }
  result.epoch_speed = steady_seconds > 0 ? double(steady_samples) / steady_seconds : 0;
  std::sort(speeds.begin(), speeds.end());
  // Epochs shorter than --disp-batches print no interval: use the epoch rate.
  result.median_interval_speed = speeds.empty() ? result.epoch_speed : speeds[speeds.size() / 2];
  return result;
}

}  // namespace ember::apps
