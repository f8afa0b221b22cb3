// tests/net/test_concat_pool.cpp — ResNet's concat-pool head (net/resnet.h:
// fc over [global average, global max] of each channel): the structure and
// its order against a computation by hand, gradients, and the checkpoint
// metadata "pool" that rebuilds it (net::infer_resnet_config, used by
// predict and finetune_resnet). The ops themselves (global_max_pool2d,
// concat) are checked on every backend by tests/ops/test_ops.cpp's harness; the
// predict program on such a checkpoint in tests/apps/test_predict.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/autograd.h"
#include "net/checkpoint.h"
#include "net/pretrained.h"
#include "net/resnet.h"
#include "net/safetensors.h"
#include "ops/ops.h"
#include "tests/support/test_helpers.h"

namespace concat_pool_test {

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::TempDir;

net::ResNetConfig cifar8(net::HeadPool pool) {
  net::ResNetConfig c;
  c.num_layers = 8;
  c.width = 4;  // stages of 4, 8, 16 channels
  c.in_channels = 3;
  c.num_classes = 5;
  c.image_size = 16;
  c.pool = pool;
  c.input_norm.channels = 3;
  for (int i = 0; i < 3; ++i) c.input_norm.mean[i] = 0.5f, c.input_norm.inv_std[i] = 4.0f;
  return c;
}

Tensor random_input(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  Tensor x = Tensor::empty(s);
  ops::normal_(x, 0.0, 1.0, gen);
  return x;
}

// Random running statistics, so that eval-mode logits depend on every buffer.
void randomise_statistics(net::ResNet& model, uint64_t seed) {
  PhiloxStream rng(seed, 7);
  for (auto& [name, t] : model.state()) {
    const bool mean = name.ends_with("running_mean"), var = name.ends_with("running_var");
    if (!mean && !var) continue;
    float* v = t->data<float>();
    for (int64_t i = 0; i < t->numel(); ++i) v[i] = mean ? 0.4f * rng.uniform() - 0.2f : 0.5f + rng.uniform();
  }
}

SafetensorsFile file_of(net::Module& model, std::map<std::string, std::string> metadata) {
  SafetensorsFile f;
  for (auto& [name, t] : model.state()) f.tensors.emplace_back(name, *t);
  f.metadata = std::move(metadata);
  return f;
}

}  // namespace concat_pool_test

using namespace concat_pool_test;

TEST_CASE("resnet concat pool: fc takes [avg, max] of each channel (2C inputs), in that order") {
  Generator gen(3);
  net::ResNet model(cifar8(net::HeadPool::concat), gen);
  CHECK(model.fc->weight.shape() == Shape{5, 32});
  CHECK(model.fc->bias.shape() == Shape{5});
  CHECK(contains(model.describe(), ", concat pool"));
  Generator gen2(3);
  net::ResNet avg(cifar8(net::HeadPool::avg), gen2);
  CHECK(avg.fc->weight.shape() == Shape{5, 16});
  CHECK(!contains(avg.describe(), "pool"));
  CHECK(model.parameter_count() == avg.parameter_count() + 5 * 16);
  // fc's init is PyTorch's default for its 32 inputs: |w| <= 1/sqrt(32), and some beyond 1/sqrt(64).
  const std::vector<double> w = model.fc->weight.to_double_vector();
  double largest = 0;
  for (double v : w) largest = std::max(largest, std::fabs(v));
  CHECK(largest <= 1 / std::sqrt(32.0));
  CHECK(largest > 1 / std::sqrt(64.0));

  randomise_statistics(model, 5);
  model.eval();
  const Tensor x = random_input({2, 3, 16, 16}, 11);
  NoGradGuard no_grad;
  const Tensor logits = model(x);
  REQUIRE(logits.shape() == Shape{2, 5});

  // By hand: the last stage's map, its per-channel mean and max, then fc.
  Tensor h = model.bn1->forward_relu((*model.conv1)(x));
  for (auto& stage : model.layers) h = (*stage)(h);
  REQUIRE(h.shape() == Shape{2, 16, 4, 4});
  const std::vector<double> hv = h.to_double_vector(), wv = model.fc->weight.to_double_vector(),
                            bv = model.fc->bias.to_double_vector(), got = logits.to_double_vector();
  for (int64_t n = 0; n < 2; ++n) {
    std::vector<double> features(32);
    for (int64_t c = 0; c < 16; ++c) {
      double sum = 0, mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < 16; ++i) {
        const double v = hv[size_t((n * 16 + c) * 16 + i)];
        sum += v;
        mx = std::max(mx, v);
      }
      features[size_t(c)] = sum / 16;  // average first (timm's catavgmax order)
      features[size_t(16 + c)] = mx;   // then the max
    }
    for (int64_t k = 0; k < 5; ++k) {
      double acc = bv[size_t(k)];
      for (int64_t j = 0; j < 32; ++j) acc += wv[size_t(k * 32 + j)] * features[size_t(j)];
      CHECK(got[size_t(n * 5 + k)] == doctest::Approx(acc).epsilon(1e-5));
    }
  }
}

TEST_CASE("resnet concat pool: gradients reach every parameter and both halves of fc; non-square maps work") {
  Generator gen(4);
  net::ResNetConfig cfg = cifar8(net::HeadPool::concat);
  net::ResNet model(cfg, gen);
  model.train();
  const Tensor x = random_input({3, 3, 16, 12}, 12);  // a 4x3 final map: the global max takes any H x W
  const Tensor labels = Tensor::from_vector({0, 3, 4}, {3}, DType::i64);
  const Tensor logits = model(x);
  CHECK(logits.shape() == Shape{3, 5});
  ops::cross_entropy(logits, labels).backward();
  for (auto& p : model.named_parameters()) {
    CAPTURE(p.name);
    const Tensor g = p.tensor->grad();
    REQUIRE(g.defined());
    CHECK(g.shape() == p.tensor->shape());
    const std::vector<double> gv = g.to_double_vector();
    CHECK(std::any_of(gv.begin(), gv.end(), [](double v) { return v != 0; }));
  }
  // Both the average and the max columns of fc.weight get gradient.
  const std::vector<double> gw = model.fc->weight.grad().to_double_vector();
  double avg_half = 0, max_half = 0;
  for (int64_t k = 0; k < 5; ++k)
    for (int64_t j = 0; j < 32; ++j) (j < 16 ? avg_half : max_half) += std::fabs(gw[size_t(k * 32 + j)]);
  CHECK(avg_half > 0);
  CHECK(max_half > 0);
}

TEST_CASE("resnet concat pool: a checkpoint with pool=concat rebuilds through infer_resnet_config with identical logits") {
  TempDir dir;
  Generator gen(8);
  net::ResNetConfig cfg = cifar8(net::HeadPool::concat);
  net::ResNet model(cfg, gen);
  randomise_statistics(model, 9);
  model.eval();
  const std::string path = dir.file("concat.safetensors");
  net::save_model(path, model, {{"num_layers", "8"}, {"pool", "concat"}});

  // What predict does: structure from the file, weights head included.
  const SafetensorsFile file = load_safetensors(path);
  const net::InferredResNet r = net::infer_resnet_config(file, path);
  CHECK(r.pool == net::HeadPool::concat);
  net::ResNetConfig rc = r.config();
  CHECK(rc.pool == net::HeadPool::concat);
  rc.image_size = cfg.image_size;
  rc.input_norm = cfg.input_norm;
  Generator other(99);
  net::ResNet rebuilt(rc, other);
  net::PretrainedOptions keep_head;
  keep_head.replace_head = false;
  net::load_pretrained(file, path, rebuilt, keep_head);
  rebuilt.eval();
  Tensor u8 = Tensor::empty({2, 3, 16, 16}, DType::u8);
  PhiloxStream rng(1, 2);
  for (int64_t i = 0; i < u8.numel(); ++i) u8.data<uint8_t>()[i] = uint8_t(rng.next_u32());
  NoGradGuard no_grad;
  CHECK(rebuilt(u8).to_double_vector() == model(u8).to_double_vector());
  CHECK(rebuilt(random_input({2, 3, 16, 16}, 3)).to_double_vector() ==
        model(random_input({2, 3, 16, 16}, 3)).to_double_vector());

  // What finetune_resnet does: the same pooling, a fresh head of 2C inputs for new classes.
  net::ResNetConfig fc = r.config();
  fc.num_classes = 7;
  Generator gen3(5);
  net::ResNet tuned(fc, gen3);
  CHECK(tuned.fc->weight.shape() == Shape{7, 32});
  net::load_pretrained(file, path, tuned);  // replace_head: everything but fc
  CHECK(tuned.conv1->weight.to_double_vector() == model.conv1->weight.to_double_vector());
}

TEST_CASE("resnet concat pool: metadata pool absent means avg, avg is accepted, another value is an error") {
  Generator gen(2);
  net::ResNet concat(cifar8(net::HeadPool::concat), gen);
  Generator gen2(2);
  net::ResNet avg(cifar8(net::HeadPool::avg), gen2);
  CHECK(net::infer_resnet_config(file_of(avg, {}), "a.safetensors").pool == net::HeadPool::avg);
  CHECK(net::infer_resnet_config(file_of(avg, {{"pool", "avg"}}), "a.safetensors").pool == net::HeadPool::avg);
  CHECK(net::infer_resnet_config(file_of(concat, {{"pool", "concat"}}), "c.safetensors").pool == net::HeadPool::concat);
  CHECK(error_of([&] { net::infer_resnet_config(file_of(concat, {{"pool", "max"}}), "c.safetensors"); }) ==
        "c.safetensors: metadata: pool 'max' is not avg or concat");
  CHECK(error_of([&] { net::infer_resnet_config(file_of(concat, {{"pool", ""}}), "c.safetensors"); }) ==
        "c.safetensors: metadata: pool '' is not avg or concat");
  // A concat-pool file without the metadata: the avg model it describes does not fit its fc.
  const SafetensorsFile untagged = file_of(concat, {});
  net::ResNetConfig rc = net::infer_resnet_config(untagged, "c.safetensors").config();
  Generator gen3(0);
  net::ResNet wrong(rc, gen3);
  net::PretrainedOptions keep_head;
  keep_head.replace_head = false;
  CHECK(contains(error_of([&] { net::load_pretrained(untagged, "c.safetensors", wrong, keep_head); }),
                 "fc.weight (file [5, 32], model [5, 16])"));
  CHECK(net::head_pool_name(net::HeadPool::concat) == std::string("concat"));
  CHECK(net::parse_head_pool("avg", "--pool") == net::HeadPool::avg);
  CHECK(error_of([&] { net::parse_head_pool("Concat", "--pool"); }) == "--pool: pool 'Concat' is not avg or concat");
}
