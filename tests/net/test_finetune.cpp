// tests/net/test_finetune.cpp — the pieces of fine-tuning below the apps:
// loading pretrained weights with a replaced head (net/pretrained.h),
// reading a ResNet's structure from its names, freezing the backbone
// (net/finetune.h), per-parameter learning rates (SGD), class subsets of an
// ImageSet, and fit()'s freeze / unfreeze schedule and top-5 accuracy.
// (Parity with torchvision itself: tests/net/test_torchvision_parity.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <cstdio>

#include "apps/training/fit.h"
#include "data/fashion_mnist.h"
#include "data/image_set.h"
#include "engine/autograd.h"
#include "net/checkpoint.h"
#include "net/finetune.h"
#include "net/pretrained.h"
#include "net/resnet.h"
#include "net/safetensors.h"
#include "net/sgd.h"
#include "ops/ops.h"
#include "tests/support/test_helpers.h"
#include "tests/support/train_recipe.h"

namespace finetune_test {

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::TempDir;

net::ResNetConfig small_imagenet_style(int layers, int64_t classes, int64_t width = 4) {
  net::ResNetConfig c;
  c.num_layers = layers;
  c.num_classes = classes;
  c.in_channels = 3;
  c.image_size = 32;
  c.stem_kernel = 7;
  c.width = width;
  return c;
}

std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }

Tensor random_images(int64_t n, Generator& gen) {
  Tensor x = Tensor::empty({n, 3, 32, 32});
  ops::normal_(x, 0.0, 1.0, gen);
  return x;
}

Tensor labels(const std::vector<double>& v) { return Tensor::from_vector(v, {int64_t(v.size())}, DType::i64); }

// Every state tensor's values by name.
std::map<std::string, std::vector<double>> snapshot(net::Module& m) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [name, t] : m.state()) out[name] = values(*t);
  return out;
}

}  // namespace finetune_test

using namespace finetune_test;

TEST_CASE("pretrained: loads everything but the head; the fresh head of another size stays") {
  TempDir dir;
  Generator g1(1), g2(2);
  net::ResNet source(small_imagenet_style(18, 10), g1);
  // Non-default BN statistics, so loading them is visible.
  Generator stats_gen(100);
  for (auto& b : source.named_buffers())
    if (contains(b.name, "running_mean")) ops::normal_(*b.tensor, 0.0, 1.0, stats_gen);
  net::save_model(dir.file("src.safetensors"), source);
  net::ResNet target(small_imagenet_style(18, 7), g2);
  const auto fresh_head = values(target.fc->weight);
  const net::PretrainedReport r = net::load_pretrained(dir.file("src.safetensors"), target);
  const auto src = snapshot(source), dst = snapshot(target);
  for (const auto& [name, v] : dst) {
    CAPTURE(name);
    if (name.rfind("fc.", 0) == 0) continue;
    CHECK(v == src.at(name));
  }
  CHECK(values(target.fc->weight) == fresh_head);
  CHECK(target.fc->weight.shape() == Shape{7, 32});
  CHECK(r.head_skipped == std::vector<std::string>{"fc.bias", "fc.weight"});
  CHECK(r.loaded == int64_t(src.size()) - 2);
  CHECK(r.converted == 0);
  CHECK(contains(r.describe(), "head not loaded: fc.bias, fc.weight"));
}

TEST_CASE("pretrained: module. prefix, F16 weights and absent num_batches_tracked are accepted and reported") {
  TempDir dir;
  Generator g1(3), g2(4);
  net::ResNet source(small_imagenet_style(18, 5), g1);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : source.state()) {
    if (contains(name, "num_batches_tracked")) continue;
    tensors.emplace_back("module." + name, t->dtype() == DType::f32 ? ops::cast(*t, DType::f16) : *t);
  }
  save_safetensors(dir.file("half.safetensors"), tensors);
  net::ResNet target(small_imagenet_style(18, 5), g2);
  const net::PretrainedReport r =
      net::load_pretrained(dir.file("half.safetensors"), target, {.head_prefix = "fc.", .replace_head = false});
  CHECK(r.stripped_module_prefix);
  CHECK(r.converted == r.loaded);
  CHECK(r.converted_from == "F16");
  CHECK(r.missing_batch_counters == 20);  // bn1 + 8 blocks x 2 + 3 downsample BNs
  CHECK(r.head_skipped.empty());
  for (auto& [name, t] : target.state()) {
    if (contains(name, "num_batches_tracked")) continue;
    const Tensor* s = nullptr;
    for (auto& [n2, t2] : source.state())
      if (n2 == name) s = t2;
    REQUIRE(s);
    const auto a = values(*t), b = values(*s);
    // f16 keeps 11 significant bits (relative error <= 2^-11), and subnormals 2^-24 apart.
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) - std::ldexp(std::abs(b[i]), -11));
    CAPTURE(name);
    CHECK(worst <= std::ldexp(1.0, -25));
  }
}

TEST_CASE("pretrained: a BF16 file (timm, Hugging Face) loads, widened exactly, and says so") {
  TempDir dir;
  Generator g1(20), g2(21);
  net::ResNet source(small_imagenet_style(18, 4), g1);
  // The BF16 file by hand: the top 16 bits of every f32 value.
  std::string header = "{";
  std::vector<uint8_t> data;
  std::map<std::string, std::vector<float>> expected;
  for (auto& [name, t] : source.state()) {
    const bool floating = t->dtype() == DType::f32;
    const auto v = values(*t);
    header += cat(header.size() > 1 ? "," : "", "\"", name, "\":{\"dtype\":\"", floating ? "BF16" : "I64",
                  "\",\"shape\":[");
    for (int d = 0; d < t->ndim(); ++d) header += cat(d ? "," : "", t->shape()[d]);
    const size_t begin = data.size();
    for (double x : v) {
      if (floating) {
        uint32_t u;
        const float f = float(x);
        std::memcpy(&u, &f, 4);
        const uint16_t top = uint16_t(u >> 16);
        data.push_back(uint8_t(top)), data.push_back(uint8_t(top >> 8));
        const uint32_t back = uint32_t(top) << 16;
        float g;
        std::memcpy(&g, &back, 4);
        expected[name].push_back(g);
      } else {
        const int64_t n = int64_t(x);
        for (int b = 0; b < 8; ++b) data.push_back(uint8_t(uint64_t(n) >> (8 * b)));
      }
    }
    header += cat("],\"data_offsets\":[", begin, ",", data.size(), "]}");
  }
  header += "}";
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  ember::testing::write_bytes(dir.file("bf16.safetensors"), bytes);

  net::ResNet target(small_imagenet_style(18, 4), g2);
  const net::PretrainedReport r = net::load_pretrained(dir.file("bf16.safetensors"), target, {.replace_head = false});
  CHECK(r.converted_from == "BF16");
  CHECK(r.converted == int64_t(expected.size()));
  CHECK(contains(r.describe(), "converted from BF16"));
  for (auto& [name, t] : target.state()) {
    if (!expected.count(name)) continue;
    CAPTURE(name);
    const auto got = values(*t);
    std::vector<float> as_float(got.begin(), got.end());
    CHECK(as_float == expected.at(name));
  }
}

TEST_CASE("pretrained: every mismatch is named in one line and the model is left untouched") {
  TempDir dir;
  Generator g1(5), g2(6), g3(7);
  net::ResNet resnet18(small_imagenet_style(18, 10), g1);
  net::save_model(dir.file("r18.safetensors"), resnet18);

  // Another depth: the missing and unexpected block names.
  net::ResNet resnet34(small_imagenet_style(34, 10), g2);
  const auto before = snapshot(resnet34);
  std::string what = error_of([&] { net::load_pretrained(dir.file("r18.safetensors"), resnet34); });
  CHECK(what.find('\n') == std::string::npos);
  CHECK(contains(what, dir.file("r18.safetensors")));
  CHECK(contains(what, "missing (layer1.2.conv1.weight"));
  CHECK(contains(what, "check --num-layers"));
  CHECK(snapshot(resnet34) == before);

  // Another width: the shapes of both sides.
  net::ResNet wide(small_imagenet_style(18, 10, 8), g3);
  what = error_of([&] { net::load_pretrained(dir.file("r18.safetensors"), wide); });
  CHECK(contains(what, "with another shape (conv1.weight (file [4, 3, 7, 7], model [8, 3, 7, 7])"));
  CHECK(!contains(what, "missing"));

  // Extra tensors the model lacks.
  auto tensors = std::vector<std::pair<std::string, Tensor>>();
  for (auto& [name, t] : resnet18.state()) tensors.emplace_back(name, *t);
  tensors.emplace_back("layer5.0.conv1.weight", Tensor::zeros({2, 2, 1, 1}));
  save_safetensors(dir.file("extra.safetensors"), tensors);
  what = error_of([&] { net::load_pretrained(dir.file("extra.safetensors"), resnet18); });
  CHECK(contains(what, "1 unexpected (layer5.0.conv1.weight)"));

  // The head, when it is not replaced, must match too.
  Generator g4(8);
  net::ResNet seven(small_imagenet_style(18, 7), g4);
  what = error_of([&] { net::load_pretrained(dir.file("r18.safetensors"), seven, {.replace_head = false}); });
  CHECK(contains(what, "fc.weight (file [10, 32], model [7, 32])"));

  // A file that is not a safetensors file at all.
  ember::testing::write_bytes(dir.file("junk.safetensors"), std::vector<uint8_t>(64, 0xff));
  what = error_of([&] { net::load_pretrained(dir.file("junk.safetensors"), seven); });
  CHECK(contains(what, dir.file("junk.safetensors")));
  CHECK(what.find('\n') == std::string::npos);
}

TEST_CASE("pretrained: the structure is read from the names and shapes") {
  struct Case {
    int layers;
    int64_t width;
    int stem;
    int64_t in_channels, classes;
  };
  for (const Case c : {Case{18, 4, 7, 3, 10}, Case{34, 2, 3, 1, 5}, Case{50, 2, 7, 3, 257}, Case{101, 2, 7, 3, 4},
                       Case{20, 16, 3, 1, 10}, Case{8, 4, 3, 3, 2}}) {
    CAPTURE(c.layers);
    net::ResNetConfig cfg;
    cfg.num_layers = c.layers;
    cfg.width = c.width;
    cfg.stem_kernel = c.stem;
    cfg.in_channels = c.in_channels;
    cfg.num_classes = c.classes;
    Generator gen(0);
    net::ResNet model(cfg, gen);
    SafetensorsFile file;
    for (auto& [name, t] : model.state()) file.tensors.emplace_back(name, *t);
    const net::InferredResNet r = net::infer_resnet_config(file, "m.safetensors");
    CHECK(r.num_layers == c.layers);
    CHECK(r.width == c.width);
    CHECK(r.stem_kernel == c.stem);
    CHECK(r.in_channels == c.in_channels);
    CHECK(r.num_classes == c.classes);
    CHECK(r.bottleneck == (c.layers >= 50));
    // The config it gives builds a model with the same state names and shapes.
    Generator gen2(1);
    net::ResNet rebuilt(r.config(), gen2);
    const auto a = model.state(), b = rebuilt.state();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(a[i].first == b[i].first);
      CHECK(a[i].second->shape() == b[i].second->shape());
    }
  }
  SafetensorsFile not_resnet;
  not_resnet.tensors.emplace_back("encoder.weight", Tensor::zeros({2, 2}));
  CHECK(contains(error_of([&] { net::infer_resnet_config(not_resnet, "x.safetensors"); }),
                 "x.safetensors: no 4-d conv1.weight"));
  SafetensorsFile odd;  // 3 basic blocks in every stage: not a depth
  odd.tensors.emplace_back("conv1.weight", Tensor::zeros({4, 3, 7, 7}));
  for (int s = 1; s <= 4; ++s)
    for (int b = 0; b < 3; ++b)
      odd.tensors.emplace_back(cat("layer", s, ".", b, ".conv1.weight"), Tensor::zeros({1, 1, 1, 1}));
  CHECK(contains(error_of([&] { net::infer_resnet_config(odd, "odd.safetensors"); }),
                 "stages of 3, 3, 3, 3 basic blocks are not a ResNet depth"));
}

TEST_CASE("finetune: a frozen backbone gets no gradients, keeps its BN statistics and gets no momentum") {
  Generator gen(9);
  net::ResNet model(small_imagenet_style(18, 3), gen);
  const net::BackboneSplit split = net::set_backbone_frozen(model, "fc.", true);
  CHECK(split.head_parameters == 2);
  CHECK(split.backbone_batch_norms == 20);
  CHECK(split.backbone_parameters == int64_t(model.named_parameters().size()) - 2);
  const auto before = snapshot(model);
  net::SGD opt(model.named_parameters(), {0.9, 1e-4, false});
  model.train();
  Generator data_gen(10);
  const Tensor x = random_images(4, data_gen);
  const Tensor y = labels({0, 1, 2, 0});
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    ops::cross_entropy(model(x), y).backward();
    for (auto& p : model.named_parameters()) {
      CAPTURE(p.name);
      CHECK(p.tensor->grad().defined() == (p.name.rfind("fc.", 0) == 0));
    }
    opt.step(0.1);
  }
  const auto after = snapshot(model);
  for (const auto& [name, v] : after) {
    CAPTURE(name);
    CHECK((v == before.at(name)) == (name.rfind("fc.", 0) != 0));  // only the head moved
  }
  const auto state = opt.state();
  REQUIRE(state.size() == 2);
  CHECK(state[0].first.rfind("momentum.fc.", 0) == 0);

  // Unfrozen: everything trains again, the BN statistics move.
  net::set_backbone_frozen(model, "fc.", false);
  opt.zero_grad();
  ops::cross_entropy(model(x), y).backward();
  opt.step(0.1);
  const auto unfrozen = snapshot(model);
  CHECK(unfrozen.at("layer1.0.conv1.weight") != after.at("layer1.0.conv1.weight"));
  CHECK(unfrozen.at("layer1.0.bn1.running_mean") != after.at("layer1.0.bn1.running_mean"));
  CHECK(unfrozen.at("bn1.num_batches_tracked") == std::vector<double>{1});

  CHECK(contains(error_of([&] { net::set_backbone_frozen(model, "classifier.", true); }),
                 "no parameter's name starts with the head prefix \"classifier.\""));
}

TEST_CASE("sgd: per-parameter learning-rate multipliers scale each update") {
  Generator gen(11);
  net::ResNet model(small_imagenet_style(18, 3), gen);
  const auto before = snapshot(model);
  net::SGD opt(model.named_parameters(), {0.0, 0.0, false});
  opt.set_lr_multipliers([](const std::string& name) { return name.rfind("fc.", 0) == 0 ? 1.0 : 0.1; });
  model.train();
  Generator data_gen(12);
  ops::cross_entropy(model(random_images(4, data_gen)),
                     labels({0, 1, 2, 0}))
      .backward();
  std::map<std::string, std::vector<double>> grads;
  for (auto& p : model.named_parameters()) grads[p.name] = values(p.tensor->grad());
  opt.step(0.5);
  for (auto& p : model.named_parameters()) {
    CAPTURE(p.name);
    const double mult = p.name.rfind("fc.", 0) == 0 ? 1.0 : 0.1;
    const auto now = values(*p.tensor), was = before.at(p.name), g = grads.at(p.name);
    double worst = 0;
    for (size_t i = 0; i < now.size(); ++i) worst = std::max(worst, std::abs(was[i] - 0.5 * mult * g[i] - now[i]));
    CHECK(worst < 1e-6);
  }
  CHECK(contains(error_of([&] { opt.set_lr_multipliers([](const std::string&) { return -1.0; }); }),
                 "learning-rate multiplier"));
}

TEST_CASE("data: select_classes keeps the listed classes, relabelled in the order given") {
  data::ImageSet set;
  set.count = 6, set.channels = 1, set.height = 1, set.width = 1, set.num_classes = 4;
  set.pixels = {10, 11, 12, 13, 14, 15};
  set.labels = {0, 1, 2, 3, 2, 1};
  set.name = "toy";
  const data::ImageSet s = data::select_classes(set, {2, 0});
  CHECK(s.count == 3);
  CHECK(s.num_classes == 2);
  CHECK(s.pixels == std::vector<uint8_t>{10, 12, 14});
  CHECK(s.labels == std::vector<int64_t>{1, 0, 0});
  CHECK(s.name == "toy{2,0}");
  CHECK(contains(error_of([&] { data::select_classes(set, {1, 1}); }), "class 1 is selected twice"));
  CHECK(contains(error_of([&] { data::select_classes(set, {0, 4}); }), "class 4 is not in [0, 4)"));
  CHECK(contains(error_of([&] { data::select_classes(set, {3}); }), "select at least 2 classes"));
}

TEST_CASE("fit: top-5 accuracy counts ties against the label") {
  // One batch of 3 samples over 7 classes; labels 0, 1, 2.
  std::vector<double> logits = {
      9, 8, 7, 6, 5, 4, 3,  // label 0: top-1
      9, 1, 8, 7, 6, 5, 4,  // label 1: 7th
      5, 5, 5, 5, 5, 5, 1,  // label 2: tied with 5 others: counts as 6th
  };
  struct OneBatch final : apps::BatchSource {
    bool done = false;
    void start_epoch(int, int64_t) override { done = false; }
    int64_t position() const override { return done ? 1 : 0; }
    bool next(data::Batch& b) override {
      if (done) return false;
      b.images = Tensor::zeros({3, 7});
      b.labels = labels({0, 1, 2});
      b.size = 3;
      done = true;
      return true;
    }
    int64_t batches_per_epoch() const override { return 1; }
    int64_t samples_per_epoch() const override { return 3; }
    int64_t batch_size() const override { return 3; }
  } source;
  struct Fixed final : net::Module {
    Tensor out;
    Tensor forward(const Tensor&) override { return out; }
  } model;
  model.out = Tensor::from_vector(logits, {3, 7});
  const apps::Accuracy a = apps::evaluate_accuracy(model, source, Device::cpu());
  CHECK(a.samples == 3);
  CHECK(a.classes == 7);
  CHECK(a.top1 == doctest::Approx(1.0 / 3));
  CHECK(a.top5 == doctest::Approx(1.0 / 3));
}

TEST_CASE("fit: --freeze-backbone with --unfreeze-epoch trains the head first, then everything (Fashion-MNIST)") {
  const data::ImageSet train = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, true), 0, 256);
  net::ResNetConfig cfg = ember::testing::small_resnet_config();
  cfg.num_layers = 8;  // the integration tests' model, shallower: this test is about which tensors move
  Generator gen(13);
  net::ResNet model(cfg, gen);
  data::BatchIterator::Options io;
  io.batch_size = 64;
  data::BatchIterator it(train, io);
  apps::FitOptions fo;
  fo.num_epochs = 1;
  fo.lr = 0.05;
  fo.schedule.kind = net::LrScheduleKind::cosine;
  fo.finetune.head_prefix = "fc.";
  fo.finetune.unfreeze_epoch = 1;
  fo.finetune.backbone_lr_mult = 0.5;
  std::FILE* log = std::tmpfile();
  fo.log = log;
  const auto start = snapshot(model);
  apps::fit(model, it, nullptr, fo);  // epoch 0 only: frozen
  const auto frozen = snapshot(model);
  for (const auto& [name, v] : frozen) {
    CAPTURE(name);
    CHECK((v == start.at(name)) == (name.rfind("fc.", 0) != 0));
  }
  fo.num_epochs = 2;
  fo.begin_epoch = 1;
  apps::fit(model, it, nullptr, fo);  // epoch 1: unfrozen
  const auto unfrozen = snapshot(model);
  CHECK(unfrozen.at("conv1.weight") != frozen.at("conv1.weight"));
  CHECK(unfrozen.at("layer3.0.bn2.running_var") != frozen.at("layer3.0.bn2.running_var"));
  std::rewind(log);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), log)) text += buf;
  std::fclose(log);
  CHECK(contains(text, "Epoch[0] Backbone frozen:"));
  CHECK(contains(text, "until Epoch[1]"));
  CHECK(contains(text, "Epoch[1] Backbone trainable: all"));
  CHECK(contains(text, "backbone at lr x 0.5"));
}

TEST_CASE("pretrained: the safetensors seed corpus loads, or fails in one line naming the file and the fault") {
  // tests/fuzz/seeds/make_safetensors_seeds.py: valid pretrained-like files and near-misses.
  const std::map<std::string, std::string> expected = {
      {"conv_bn.safetensors", ""},
      {"half_module.safetensors", ""},
      {"empty_tensor.safetensors", ""},
      {"bf16.safetensors", ""},
      {"bad_dtype.safetensors", "dtype \"F8_E4M3\" is not supported"},
      {"overlap.safetensors", "overlap tensor \"a\""},
      {"header_lies.safetensors", "points past the end of the file"},
      {"truncated.safetensors", "go past the end of the data section"},
  };
  for (const auto& [name, fault] : expected) {
    const std::string path = "tests/fuzz/seeds/safetensors/" + name;
    CAPTURE(path);
    if (fault.empty()) {
      CHECK(!load_safetensors(path).tensors.empty());
      continue;
    }
    const std::string what = error_of([&] { load_safetensors(path); });
    CHECK(what.rfind(path + ": ", 0) == 0);
    CHECK(contains(what, fault));
    CHECK(what.find('\n') == std::string::npos);
  }
}
