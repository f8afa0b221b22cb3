// tests/net/dist/test_data_parallel.cpp — data-parallel training in one process:
// ranks are threads with real TCP communicators on loopback
// (tests/support/comm_test_helpers.h), each with its own model, optimizer and
// gradient reducer (net/dist/reducer.h).
//
//  * the reducer's buckets (reverse order, small first bucket, one dtype
//    each) and that .grad ends as the average of the ranks' gradients;
//  * 2 and 4 ranks training ResNet-20 on real Fashion-MNIST images end with
//    the same weights as one rank with the whole batch: batch norm in eval
//    mode (per-sample, so sharding changes nothing) and synchronised batch
//    norm in training mode (ops::batch_norm2d_sync);
//  * fp16: an overflow on one rank makes every rank skip the step.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "data/fashion_mnist.h"
#include "net/dist/data_parallel.h"
#include "net/dist/reducer.h"
#include "net/layers.h"
#include "net/mixed_precision.h"
#include "net/resnet.h"
#include "net/sgd.h"
#include "tests/support/comm_test_helpers.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using namespace ember::net::dist;
using ember::testing::loopback_options;
using ember::testing::run_ranks;

void require_all_passed(const std::vector<ember::testing::RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank ", r, ": ", results[r].error);
    CHECK(results[r].error.empty());
  }
}

// A model with parameters of known sizes, registered in a known order.
struct Stack : net::Module {
  net::Linear a{64, 256}, b{256, 4096}, c{4096, 8};  // 16.6k, 1.05M, 32.8k parameters (+ biases)
  Stack() {
    register_module("a", std::shared_ptr<net::Linear>(std::shared_ptr<net::Linear>(), &a));
    register_module("b", std::shared_ptr<net::Linear>(std::shared_ptr<net::Linear>(), &b));
    register_module("c", std::shared_ptr<net::Linear>(std::shared_ptr<net::Linear>(), &c));
  }
  Tensor forward(const Tensor& x) override { return c(b(a(x))); }
};

}  // namespace

TEST_CASE("data-parallel: buckets follow reverse registration order, the first one small, one dtype each") {
  TcpCommOptions o;  // one rank: real communicator, no sockets
  auto comm = make_tcp_comm(o);
  Stack m;
  ReducerOptions ro;
  ro.first_bucket_bytes = 200 << 10;
  ro.bucket_bytes = 2 << 20;
  Reducer r(*comm, m.named_parameters(), ro);
  // Reverse order: c.bias, c.weight, b.bias (144 KiB) fill the first bucket;
  // b.weight (4 MiB, alone: larger than the cap); then a.bias and a.weight.
  CHECK(r.bucket_count() == 3);
  CHECK(testing::contains(r.describe(), "f32: 0.14, 4.00, 0.06 MiB"));

  // The first bucket is never larger than --bucket-size-mb: with 100 KiB
  // buckets c.weight (128 KiB) and b.weight stand alone.
  ReducerOptions small;
  small.bucket_bytes = 100 << 10;
  Reducer rs(*comm, m.named_parameters(), small);
  CHECK(testing::contains(rs.describe(), "f32: 0.00, 0.12, 0.02, 4.00, 0.06 MiB"));

  // f16 parameters get buckets of their own.
  net::Masters masters = net::convert_to_half(m);
  m.a.bias = Tensor::zeros({256});  // keep one f32 parameter among f16 ones
  m.a.bias.set_requires_grad(true);
  Reducer r16(*comm, m.named_parameters(), ro);
  CHECK(testing::contains(r16.describe(), "f32: 0.00 MiB"));
  CHECK(testing::contains(r16.describe(), "f16: "));
}

TEST_CASE("data-parallel: after backward every rank holds the average of the ranks' gradients") {
  const int world = 3;
  std::mutex mu;
  std::vector<std::vector<double>> local(world), reduced(world);  // b.weight's gradient per rank
  require_all_passed(run_ranks(loopback_options(world), [&](Comm& comm, int r) {
    Stack m;
    Generator gen(7);  // same weights everywhere
    for (auto& p : m.named_parameters()) ops::uniform_(*p.tensor, -0.05, 0.05, gen);
    Generator data(100 + uint64_t(r));  // each rank its own batch
    Tensor x = Tensor::empty({5, 64});
    ops::normal_(x, 0, 1, data);
    ReducerOptions ro;
    ro.first_bucket_bytes = 64 << 10;
    ro.bucket_bytes = 1 << 20;
    Reducer reducer(comm, m.named_parameters(), ro);
    ops::sum(m(x)).backward();  // outside prepare(): the hooks leave it alone
    const std::vector<double> mine = m.b.weight.grad().to_double_vector();
    m.zero_grad();
    reducer.prepare();
    ops::sum(m(x)).backward();
    reducer.finish();
    std::lock_guard<std::mutex> lock(mu);
    local[size_t(r)] = mine;
    reduced[size_t(r)] = m.b.weight.grad().to_double_vector();
  }));
  for (size_t i = 0; i < reduced[0].size(); i += 997) {
    double mean = 0;
    for (int r = 0; r < world; ++r) mean += local[size_t(r)][i] / world;
    for (int r = 0; r < world; ++r) REQUIRE(reduced[size_t(r)][i] == doctest::Approx(mean).epsilon(1e-5));
    CHECK(reduced[1][i] == reduced[0][i]);  // bit-identical on every rank
  }
}

namespace {

// ResNet-20 in f64 on 32 real Fashion-MNIST images: `steps` SGD steps with
// the whole batch on one rank, or with rank r's shard (r, r+P, ...) on P.
const data::ImageSet& images() {
  static const data::ImageSet set = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, true), 0, 32);
  return set;
}

net::ResNetConfig tiny_resnet() {
  net::ResNetConfig cfg;
  cfg.num_layers = 20;
  cfg.dtype = DType::f64;
  cfg.input_norm.channels = 1;
  cfg.input_norm.mean[0] = 0.286f;
  cfg.input_norm.inv_std[0] = 2.8f;
  return cfg;
}

// The images and labels of the positions rank, rank + world, ... of the first `n`.
void shard(int rank, int world, Tensor& x, Tensor& y) {
  const data::ImageSet& s = images();
  const int64_t n = s.count / world, pixels = s.channels * s.height * s.width;
  x = Tensor::empty({n, s.channels, s.height, s.width}, DType::u8);
  y = Tensor::empty({n}, DType::i64);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t src = rank + i * world;
    std::memcpy(x.data<uint8_t>() + i * pixels, s.pixels.data() + src * pixels, size_t(pixels));
    y.data<int64_t>()[i] = s.labels[size_t(src)];
  }
}

enum class BatchNormMode { eval, sync };

// Trains and returns every parameter and buffer, by name.
std::map<std::string, std::vector<double>> train(Comm* comm, BatchNormMode mode, int steps) {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  Generator gen(3);
  net::ResNet model(tiny_resnet(), gen);
  if (mode == BatchNormMode::eval) {
    // Non-trivial running statistics, the same everywhere.
    Generator stats(11);
    for (auto& b : model.named_buffers())
      if (b.name.find("running_var") != std::string::npos) ops::uniform_(*b.tensor, 0.5, 2.0, stats);
    model.eval();
  } else if (comm) {
    net::set_sync_batch_norm(model, make_batch_norm_sync(*comm));
  }
  net::SGD opt(model.named_parameters(), {0.9, 1e-3, true});
  std::unique_ptr<Reducer> reducer;
  if (comm) {
    ReducerOptions ro;
    ro.first_bucket_bytes = 16 << 10;  // several buckets even for this small model
    ro.bucket_bytes = 64 << 10;
    reducer = std::make_unique<Reducer>(*comm, model.named_parameters(), ro);
  }
  Tensor x, y;
  shard(rank, world, x, y);
  for (int step = 0; step < steps; ++step) {
    const Tensor loss = ops::cross_entropy(model(x), y);
    opt.zero_grad();
    if (reducer) reducer->prepare();
    loss.backward();
    if (reducer) reducer->finish();
    opt.step(0.05);
  }
  std::map<std::string, std::vector<double>> out;
  for (auto& [name, t] : model.state()) out[name] = t->to_double_vector();
  return out;
}

void compare(const std::map<std::string, std::vector<double>>& got,
             const std::map<std::string, std::vector<double>>& want, double tol) {
  REQUIRE(got.size() == want.size());
  double worst = 0;
  std::string where;
  for (const auto& [name, w] : want) {
    const auto& g = got.at(name);
    REQUIRE(g.size() == w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      const double d = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
      if (d > worst) worst = d, where = cat(name, "[", i, "]");
    }
  }
  INFO("largest difference ", worst, " at ", where);
  CHECK(worst <= tol);
}

}  // namespace

TEST_CASE("data-parallel: 2 and 4 ranks end with the weights of one rank with the whole batch") {
  const int steps = 6;
  for (BatchNormMode mode : {BatchNormMode::eval, BatchNormMode::sync}) {
    const auto single = train(nullptr, mode, steps);
    for (int world : {2, 4}) {
      CAPTURE(world);
      CAPTURE(mode == BatchNormMode::eval ? "batch norm in eval mode" : "synchronised batch norm");
      std::vector<std::map<std::string, std::vector<double>>> results(static_cast<size_t>(world));
      require_all_passed(run_ranks(loopback_options(world), [&](Comm& comm, int r) {
        results[size_t(r)] = train(&comm, mode, steps);
      }));
      // Same sums in another order: f64 rounding differences only.
      compare(results[0], single, 1e-10);
      for (int r = 1; r < world; ++r) CHECK(results[size_t(r)] == results[0]);  // identical on every rank
    }
  }
}

TEST_CASE("data-parallel: without synchronisation, training-mode batch norm differs from the whole batch") {
  // The control for the test above: per-rank batch statistics are not the
  // whole batch's, so the equivalence needs eval mode or --sync-bn.
  std::vector<std::map<std::string, std::vector<double>>> results(2);
  require_all_passed(run_ranks(loopback_options(2), [&](Comm& comm, int r) {
    Generator gen(3);
    net::ResNet model(tiny_resnet(), gen);
    net::SGD opt(model.named_parameters(), {0.9, 1e-3, true});
    Reducer reducer(comm, model.named_parameters());
    Tensor x, y;
    shard(r, 2, x, y);
    for (int step = 0; step < 3; ++step) {
      const Tensor loss = ops::cross_entropy(model(x), y);
      opt.zero_grad();
      reducer.prepare();
      loss.backward();
      reducer.finish();
      opt.step(0.05);
    }
    for (auto& [name, t] : model.state()) results[size_t(r)][name] = t->to_double_vector();
  }));
  const auto single = train(nullptr, BatchNormMode::sync, 3);  // no comm: plain batch norm over the whole batch
  double worst = 0;
  for (const auto& [name, w] : single)
    for (size_t i = 0; i < w.size(); ++i)
      if (name.find("running") == std::string::npos)
        worst = std::max(worst, std::abs(results[0].at(name)[i] - w[i]));
  CHECK(worst > 1e-6);
}

TEST_CASE("data-parallel: f16 gradients travel as f16; an overflow on one rank skips the step on every rank") {
  const int world = 2;
  std::vector<int> took(world, -1), finite_alone(world, -1);
  std::vector<std::vector<double>> weights(world);
  require_all_passed(run_ranks(loopback_options(world), [&](Comm& comm, int r) {
    net::Linear fc(16, 4);
    Generator gen(5);
    ops::uniform_(fc.weight, -0.1, 0.1, gen);
    net::SGD opt(fc.named_parameters(), {0.9, 0.0, false}, net::convert_to_half(fc));
    Reducer reducer(comm, fc.named_parameters());
    REQUIRE(testing::contains(reducer.describe(), "f16"));
    // Loss scale 1024: rank 0's weight gradient (8 x 3000 x 1024) overflows f16, rank 1's (8 x 0.5 x 1024) does not.
    Tensor x = Tensor::full({8, 16}, r == 0 ? 3000.0 : 0.5, DType::f16);
    auto scaled_loss = [&] { return ops::scale(ops::sum(ops::cast(fc(x), DType::f32)), 1024.0); };
    scaled_loss().backward();  // alone (outside prepare: the reducer leaves it)
    finite_alone[size_t(r)] = opt.gradients_finite() ? 1 : 0;
    opt.zero_grad();
    reducer.prepare();
    scaled_loss().backward();
    reducer.finish();
    took[size_t(r)] = opt.step_if_finite(0.1, 1.0 / 1024.0) ? 1 : 0;
    weights[size_t(r)] = fc.weight.to_double_vector();
  }));
  CHECK(finite_alone[0] == 0);
  CHECK(finite_alone[1] == 1);
  CHECK(took[0] == 0);  // both ranks skip: the average carries rank 0's inf
  CHECK(took[1] == 0);
  CHECK(weights[0] == weights[1]);
}

TEST_CASE("data-parallel: bf16 gradients travel as bf16 and average; a NaN on one rank skips the step on every rank") {
  const int world = 2;
  std::vector<int> took(world, -1), took_nan(world, -1);
  std::vector<std::vector<double>> alone(world), averaged(world), weights(world), weights_after_nan(world);
  require_all_passed(run_ranks(loopback_options(world), [&](Comm& comm, int r) {
    net::Linear fc(16, 4);
    Generator gen(5);
    ops::uniform_(fc.weight, -0.1, 0.1, gen);
    net::SGD opt(fc.named_parameters(), {0.9, 0.0, false}, net::convert_to_half(fc, DType::bf16));
    // (checks inside a rank throw: run_ranks reports them)
    EMBER_CHECK(fc.weight.dtype() == DType::bf16, "the weight is ", fc.weight.str());
    Reducer reducer(comm, fc.named_parameters());
    EMBER_CHECK(testing::contains(reducer.describe(), "bf16"), "buckets: ", reducer.describe());
    Tensor x = Tensor::full({8, 16}, r == 0 ? 0.75 : -0.25, DType::bf16);
    auto loss = [&](const Tensor& in) { return ops::sum(ops::cast(fc(in), DType::f32)); };  // no loss scale
    loss(x).backward();  // alone (outside prepare: the reducer leaves it)
    alone[size_t(r)] = fc.weight.grad().to_double_vector();
    opt.zero_grad();
    reducer.prepare();
    loss(x).backward();
    reducer.finish();
    EMBER_CHECK(fc.weight.grad().dtype() == DType::bf16, "the gradient is ", fc.weight.grad().str());
    averaged[size_t(r)] = fc.weight.grad().to_double_vector();
    took[size_t(r)] = opt.step_if_finite(0.1) ? 1 : 0;
    weights[size_t(r)] = fc.weight.to_double_vector();
    opt.zero_grad();
    // A NaN input on rank 0 only: the averaged gradients carry it to both ranks.
    Tensor bad = Tensor::full({8, 16}, r == 0 ? std::nan("") : -0.25, DType::bf16);
    reducer.prepare();
    loss(bad).backward();
    reducer.finish();
    took_nan[size_t(r)] = opt.step_if_finite(0.1) ? 1 : 0;
    weights_after_nan[size_t(r)] = fc.weight.to_double_vector();
  }));
  CHECK(took[0] == 1);
  CHECK(took[1] == 1);
  CHECK(averaged[0] == averaged[1]);  // every rank holds the same bits
  for (size_t i = 0; i < averaged[0].size(); ++i) {
    const double want = (alone[0][i] + alone[1][i]) / 2;  // each term divided by 2 and rounded, then the sum rounded
    const double bound = 2 * std::ldexp(1.0, -8) * std::max(std::abs(alone[0][i]), std::abs(alone[1][i]));
    CHECK(std::abs(averaged[0][i] - want) <= bound);
  }
  CHECK(weights[0] == weights[1]);
  CHECK(took_nan[0] == 0);
  CHECK(took_nan[1] == 0);
  CHECK(weights_after_nan[0] == weights[0]);
  CHECK(weights_after_nan[1] == weights[1]);
}
