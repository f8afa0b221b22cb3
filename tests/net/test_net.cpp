// tests/net/test_net.cpp — modules, the ResNet family, SGD and the learning-rate
// schedules, checked against PyTorch/torchvision through fixtures made by
// tests/fixtures/make_fixtures.py (Debian's python3-torch; never run by the
// tests themselves).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "engine/autograd.h"
#include "net/checkpoint.h"
#include "net/lr_schedule.h"
#include "net/resnet.h"
#include "net/safetensors.h"
#include "net/sgd.h"
#include "ops/ops.h"

namespace {

using namespace ember;

const std::string kFixtures = "tests/fixtures/";

net::ResNetConfig imagenet_config(int layers) {
  net::ResNetConfig c;
  c.num_layers = layers;
  c.num_classes = 1000;
  c.in_channels = 3;
  c.image_size = 224;
  return c;
}

std::string shape_text(const Shape& s) {
  if (s.ndim() == 0) return "-";
  std::ostringstream out;
  for (int i = 0; i < s.ndim(); ++i) out << (i ? "," : "") << s[i];
  return out.str();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto va = a.to_double_vector(), vb = b.to_double_vector();
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    const double d = std::abs(va[i] - vb[i]);
    if (!(d <= m)) m = std::isnan(d) ? INFINITY : d;  // a NaN is never within tolerance
  }
  return m;
}

}  // namespace

TEST_CASE("resnet: torchvision's state_dict names, order, dtypes and shapes for resnet18 and resnet50") {
  std::ifstream in(kFixtures + "torchvision_resnet_keys.txt");
  REQUIRE_MESSAGE(in.good(), "missing fixture tests/fixtures/torchvision_resnet_keys.txt (run from the repo root)");
  std::map<std::string, std::vector<std::string>> expected;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string model, name, dtype, shape;
    ls >> model >> name >> dtype >> shape;
    expected[model].push_back(name + " " + dtype + " " + shape);
  }
  for (int layers : {18, 50}) {
    CAPTURE(layers);
    Generator gen(0);
    net::ResNet model(imagenet_config(layers), gen);
    std::vector<std::string> got;
    for (auto& [name, t] : model.state())
    {
      std::ostringstream line;
      line << name << ' ' << (t->dtype() == DType::i64 ? "int64" : "float32") << ' ' << shape_text(t->shape());
      got.push_back(line.str());
    }
    const auto& want = expected["resnet" + std::to_string(layers)];
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == want[i]);
  }
}

TEST_CASE("resnet: parameter counts match PyTorch's models") {
  // torchvision resnet18/50 and the CIFAR-style nets of scripts/torch_ref.py
  // (projection shortcuts), counted with PyTorch.
  const std::pair<int, int64_t> imagenet[] = {{18, 11689512}, {50, 25557032}};
  for (auto [layers, count] : imagenet) {
    Generator gen(0);
    net::ResNet m(imagenet_config(layers), gen);
    CHECK(m.parameter_count() == count);
  }
  const std::pair<int, int64_t> cifar[] = {{20, 272186}, {56, 855482}};
  for (auto [layers, count] : cifar) {
    net::ResNetConfig c;
    c.num_layers = layers;
    Generator gen(0);
    net::ResNet m(c, gen);
    CHECK(m.parameter_count() == count);
  }
}

TEST_CASE("resnet: depth validation, small-input stem, output shapes") {
  net::ResNetConfig c;
  c.num_layers = 19;
  Generator gen(0);
  CHECK_THROWS_WITH_AS(net::ResNet(c, gen), doctest::Contains("--num-layers 19 is not a ResNet depth"), Error);

  NoGradGuard no_grad;
  for (int layers : {18, 50}) {
    net::ResNetConfig s;
    s.num_layers = layers;
    s.in_channels = 1;
    s.image_size = 28;
    net::ResNet m(s, gen);
    CHECK(m.conv1->weight.shape() == Shape{64, 1, 3, 3});  // 3x3 stem, no max-pool
    CHECK(m.maxpool == nullptr);
    m.eval();
    const Tensor out = m(Tensor::zeros({2, 1, 28, 28}));
    CHECK(out.shape() == Shape{2, 10});
  }
  net::ResNet big(imagenet_config(18), gen);
  CHECK(big.conv1->weight.shape() == Shape{64, 3, 7, 7});
  CHECK(big.maxpool != nullptr);
  big.eval();
  CHECK(big(Tensor::zeros({1, 3, 64, 64})).shape() == Shape{1, 1000});
}

TEST_CASE("resnet: initialisation follows torchvision (kaiming fan-out, BN 1/0, fc uniform) and the seed") {
  net::ResNetConfig c;
  Generator g1(5), g2(5), g3(6);
  net::ResNet a(c, g1), b(c, g2), d(c, g3);
  CHECK(max_abs_diff(a.conv1->weight, b.conv1->weight) == 0.0);
  CHECK(max_abs_diff(a.conv1->weight, d.conv1->weight) > 0.0);
  // layer3.0.conv2: [64, 64, 3, 3], std sqrt(2 / (64*9)) = 0.0589
  auto* block = dynamic_cast<net::BasicBlock*>(&(*a.layers[2])[0]);
  REQUIRE(block);
  const auto w = block->conv2->weight.to_double_vector();
  double sum = 0, sq = 0;
  for (double v : w) sum += v, sq += v * v;
  const double mean = sum / double(w.size()), std = std::sqrt(sq / double(w.size()) - mean * mean);
  CHECK(std::abs(mean) < 0.003);
  CHECK(std == doctest::Approx(std::sqrt(2.0 / (64 * 9))).epsilon(0.03));
  for (double v : block->bn1->weight.to_double_vector()) CHECK(v == 1.0);
  for (double v : block->bn1->bias.to_double_vector()) CHECK(v == 0.0);
  for (double v : a.fc->weight.to_double_vector()) CHECK(std::abs(v) <= 1.0 / 8.0);  // 1/sqrt(64)
  // zero_init_residual zeroes the last BN of each block.
  c.zero_init_residual = true;
  Generator g4(5);
  net::ResNet z(c, g4);
  auto* zb = dynamic_cast<net::BasicBlock*>(&(*z.layers[0])[0]);
  for (double v : zb->bn2->weight.to_double_vector()) CHECK(v == 0.0);
}

TEST_CASE("resnet: dropout before fc draws its masks from (seed, step, stream), and only in training") {
  net::ResNetConfig c;
  c.num_layers = 8;
  c.dropout = 0.5;
  net::ResNetConfig plain_config = c;
  plain_config.dropout = 0;
  Generator g1(3), g2(3);
  net::ResNet m(c, g1), plain(plain_config, g2);  // the same weights: Dropout has no parameters
  CHECK(m.describe().find(", dropout 0.5") != std::string::npos);
  CHECK(m.state().size() == plain.state().size());
  Generator data(11);
  Tensor x = Tensor::empty({6, 1, 28, 28});
  ops::uniform_(x, -1, 1, data);
  NoGradGuard no_grad;
  const auto logits = [&](net::ResNet& model, uint64_t seed, uint64_t step, uint64_t stream) {
    net::set_dropout_step(model, seed, step, stream);
    return model(x).to_double_vector();
  };
  // Evaluation: no dropout (first, before training-mode forwards move the running statistics).
  m.eval();
  plain.eval();
  CHECK(logits(m, 1, 7, 0) == logits(plain, 1, 7, 0));
  m.train();
  plain.train();
  const auto a = logits(m, 1, 7, 0);
  CHECK(a == logits(m, 1, 7, 0));  // the same step again: the same masks
  CHECK(a != logits(m, 1, 8, 0));  // the next step
  CHECK(a != logits(m, 2, 7, 0));  // another seed
  CHECK(a != logits(m, 1, 7, 1));  // another rank
  CHECK(a != logits(plain, 1, 7, 0));
  CHECK_THROWS_WITH_AS(net::Dropout(1.0), doctest::Contains("Dropout: p must be in [0, 1), got 1"), Error);
}

TEST_CASE("resnet: forward, loss, gradients, BN statistics and an SGD step agree with PyTorch (f64)") {
  const SafetensorsFile ref = load_safetensors(kFixtures + "torch_resnet8_reference.safetensors");
  auto get = [&](const std::string& name) -> const Tensor& {
    const Tensor* t = ref.find(name);
    REQUIRE_MESSAGE(t, "fixture has no tensor " << name);
    return *t;
  };
  net::ResNetConfig c;
  c.num_layers = 8;
  c.image_size = 12;
  c.dtype = DType::f64;
  Generator gen(0);
  net::ResNet model(c, gen);
  // The initial state was made (and stored) in f32; the model runs in f64.
  for (auto& [name, t] : model.state()) {
    const Tensor& src = get("init." + name);
    t->copy_from(src.dtype() == t->dtype() ? src : ops::cast(src, t->dtype()));
  }

  model.train();
  const Tensor logits = model(get("input"));
  CHECK(max_abs_diff(logits, get("logits")) < 1e-10);
  const Tensor loss = ops::cross_entropy(logits, get("labels"), 0.1);
  CHECK(loss.item() == doctest::Approx(get("loss").item()).epsilon(1e-12));
  loss.backward();
  int checked = 0;
  for (auto& p : model.named_parameters()) {
    if (!ref.find("grad." + p.name)) continue;  // the fixture keeps a representative subset
    CAPTURE(p.name);
    CHECK(max_abs_diff(p.tensor->grad(), get("grad." + p.name)) < 1e-10);
    ++checked;
  }
  CHECK(checked == 9);
  for (auto& b : model.named_buffers()) {
    if (b.name.find("running") == std::string::npos) continue;
    CAPTURE(b.name);
    CHECK(max_abs_diff(*b.tensor, get("after_forward." + b.name)) < 1e-12);
  }
  net::SGD opt(model.named_parameters(), {0.9, 5e-4, true});
  opt.step(0.1);
  for (auto& p : model.named_parameters()) {
    if (!ref.find("after_step." + p.name)) continue;
    CAPTURE(p.name);
    CHECK(max_abs_diff(*p.tensor, get("after_step." + p.name)) < 1e-12);
  }
  model.eval();
  NoGradGuard no_grad;
  CHECK(max_abs_diff(model(get("input")), get("eval_logits")) < 1e-10);
}

TEST_CASE("sgd: weight decay only on conv/linear weights; momentum, Nesterov, skipped parameters") {
  net::ResNetConfig c;
  c.num_layers = 8;
  Generator gen(0);
  net::ResNet model(c, gen);
  for (auto& p : model.named_parameters()) {
    CAPTURE(p.name);
    const bool is_weight_of_conv_or_fc = p.tensor->ndim() > 1;
    CHECK(p.decay == is_weight_of_conv_or_fc);
  }
  // One parameter by hand: w = 1, g = 0.5, lr 0.1, mom 0.9, wd 0.1, Nesterov.
  Tensor w = Tensor::full({3}, 1.0, DType::f64);
  w.set_requires_grad(true);
  Tensor frozen = Tensor::full({2}, 2.0, DType::f64);
  frozen.set_requires_grad(true);
  net::SGD opt({{"w", &w, true}, {"frozen", &frozen, true}}, {0.9, 0.1, true});
  w.set_grad(Tensor::full({3}, 0.5, DType::f64));
  opt.step(0.1);  // g' = 0.6; buf = 0.6; step = 0.6 + 0.9*0.6 = 1.14
  CHECK(w.to_double_vector()[0] == doctest::Approx(1.0 - 0.1 * 1.14));
  CHECK(frozen.to_double_vector()[0] == 2.0);  // no gradient: untouched
  CHECK(opt.state().size() == 1);
  w.set_grad(Tensor::full({3}, 0.5, DType::f64));
  const double w1 = 1.0 - 0.1 * 1.14;
  opt.step(0.1);  // g' = 0.5 + 0.1*w1; buf = 0.9*0.6 + g'; step = g' + 0.9*buf
  const double g2 = 0.5 + 0.1 * w1, buf2 = 0.9 * 0.6 + g2;
  CHECK(w.to_double_vector()[1] == doctest::Approx(w1 - 0.1 * (g2 + 0.9 * buf2)));
  CHECK_THROWS_WITH_AS(net::SGD({}, {0.0, 0.0, true}), doctest::Contains("Nesterov"), Error);
}

TEST_CASE("lr schedules: step, cosine and one-cycle against PyTorch's values") {
  net::LrScheduleOptions o;
  o.base_lr = 0.2;
  o.steps_per_epoch = 10;
  o.num_epochs = 10;
  o.kind = net::LrScheduleKind::onecycle;
  // torch.optim.lr_scheduler.OneCycleLR(max_lr=0.2, total_steps=100, pct_start=0.25)
  const std::pair<int, double> onecycle[] = {{0, 0.008000000000000007}, {1, 0.008821293308114209},
                                             {10, 0.07915337167015801}, {23, 0.1991787066918858},
                                             {24, 0.2},                 {25, 0.1999122833607538},
                                             {50, 0.14632981819357213}, {75, 0.04641793483281831},
                                             {99, 8e-07}};
  net::LrSchedule one(o);
  for (auto [it, lr] : onecycle) CHECK(one.lr_at(it) == doctest::Approx(lr).epsilon(1e-9));
  CHECK(one.momentum_at(0) == o.momentum);  // no cycling: the constant momentum
  CHECK(one.momentum_at(50) == o.momentum);

  // Momentum cycling: OneCycleLR(..., base_momentum=0.85, max_momentum=0.95), read from
  // optimizer.param_groups[0]['momentum'] before each step.
  o.cycle_momentum = true;
  o.max_momentum = 0.95;
  o.base_momentum = 0.85;
  const std::pair<int, double> moms[] = {{0, 0.95},  {1, 0.9495722430686905},  {10, 0.912940952255126},
                                         {23, 0.8504277569313095}, {24, 0.85}, {25, 0.850043858495057},
                                         {50, 0.8768351982440069}, {75, 0.9267913397489498}, {99, 0.95}};
  net::LrSchedule cycled(o);
  for (auto [it, m] : moms) CHECK(cycled.momentum_at(it) == doctest::Approx(m).epsilon(1e-12));
  for (auto [it, lr] : onecycle) CHECK(cycled.lr_at(it) == doctest::Approx(lr).epsilon(1e-9));  // lr unchanged
  o.base_momentum = 0.96;  // MIN above MAX
  CHECK_THROWS_WITH_AS(net::LrSchedule{o}, doctest::Contains("--moms"), Error);
  o.base_momentum = 0.85;
  o.kind = net::LrScheduleKind::cosine;
  CHECK_THROWS_WITH_AS(net::LrSchedule{o}, doctest::Contains("needs --lr-schedule onecycle"), Error);
  o.cycle_momentum = false;

  // torch.optim.lr_scheduler.CosineAnnealingLR(T_max=100), lr 0.1
  o.kind = net::LrScheduleKind::cosine;
  o.base_lr = 0.1;
  net::LrSchedule cos(o);
  const std::pair<int, double> cosine[] = {{0, 0.1}, {1, 0.09997532801828658}, {50, 0.05}, {99, 2.4671981713420017e-05}};
  for (auto [it, lr] : cosine) CHECK(cos.lr_at(it) == doctest::Approx(lr).epsilon(1e-9));

  // Step (MXNet's MultiFactorScheduler) with 2 warm-up epochs.
  o.kind = net::LrScheduleKind::step;
  o.step_epochs = {5, 8};
  o.factor = 0.1;
  o.warmup_epochs = 2;
  net::LrSchedule step(o);
  CHECK(step.lr_at(0) == doctest::Approx(0.1 / 20));
  CHECK(step.lr_at(19) == doctest::Approx(0.1));
  CHECK(step.lr_at(49) == doctest::Approx(0.1));
  CHECK(step.lr_at(50) == doctest::Approx(0.01));
  CHECK(step.lr_at(80) == doctest::Approx(0.001));
  CHECK_THROWS_WITH_AS(net::parse_lr_schedule("linear"), doctest::Contains("unknown --lr-schedule 'linear'"), Error);
  o.warmup_epochs = 11;
  CHECK_THROWS_AS(net::LrSchedule{o}, Error);
}

TEST_CASE("checkpoint: save/load round trip and strict loading") {
  const std::string path = "/tmp/ember_test_ckpt.safetensors";
  net::ResNetConfig c;
  c.num_layers = 8;
  Generator g1(1), g2(2);
  net::ResNet a(c, g1), b(c, g2);
  a.bn1->num_batches_tracked.data<int64_t>()[0] = 17;
  net::save_model(path, a, {{"epoch", "3"}});
  const auto meta = net::load_model(path, b);
  CHECK(meta.at("epoch") == "3");
  CHECK(meta.at("format") == "pt");
  for (size_t i = 0; i < a.state().size(); ++i) CHECK(max_abs_diff(*a.state()[i].second, *b.state()[i].second) == 0.0);
  CHECK(b.bn1->num_batches_tracked.data<int64_t>()[0] == 17);

  // A model that differs: the load is refused before anything is overwritten.
  net::ResNetConfig d = c;
  d.num_layers = 14;
  Generator g3(3);
  net::ResNet deeper(d, g3);
  const double before = deeper.conv1->weight.to_double_vector()[0];
  CHECK_THROWS_WITH_AS(net::load_model(path, deeper), doctest::Contains("missing tensor \"layer1.1.conv1.weight\""),
                       Error);
  CHECK(deeper.conv1->weight.to_double_vector()[0] == before);
  CHECK_THROWS_WITH_AS(net::load_model("/tmp/does-not-exist.safetensors", b),
                       doctest::Contains("/tmp/does-not-exist.safetensors"), Error);
  std::remove(path.c_str());
}
