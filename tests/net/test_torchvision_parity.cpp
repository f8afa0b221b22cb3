// tests/net/test_torchvision_parity.cpp — exact interop with torchvision's ResNets
// (issue 11): state_dicts of torchvision's own classes load into net::ResNet
// through net::load_pretrained and give PyTorch's eval and train-mode logits,
// loss, every gradient and the running statistics; F16, counter-less and
// DataParallel ("module.") files load alike; net::save_model writes exactly
// the state_dict PyTorch's load_state_dict(strict=True) takes; wrong and
// hostile files are refused with one line naming the file.
//
// Fixtures: tests/fixtures/make_torchvision_fixtures.py (Debian's python3-torch
// and python3-torchvision). The references are PyTorch's results in float64 from
// the float32 weights; "relative error" is max|ember - torch| / max|torch| over
// one tensor. The narrow nets run in f32 (issue 11's tolerances: 1e-4 for
// logits, loss and statistics, 1e-3 for gradients) and again in f64 (1e-6,
// limited only by the F32 storage of the references). Two tests run Python themselves, only when /usr/bin/python3 can
// import torch and torchvision (otherwise they are skipped, with the reason):
// the strict-load check (tests/fixtures/check_strict_load.py) and the full-size
// resnet18/resnet50 comparison (the generator's --full mode, in a temp dir).
#include <doctest/doctest.h>

#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"
#include "tests/support/refs_env.h"
#include "tests/support/torch_reference.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/file_io.h"
#include "net/checkpoint.h"
#include "net/pretrained.h"
#include "net/resnet.h"
#include "net/safetensors.h"
#include "ops/ops.h"

namespace parity_test {

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::write_bytes;

const std::string kFixtures = "tests/fixtures/";
const std::string kPython = "/usr/bin/python3";

// A narrow torchvision ResNet of the generator (NARROW there).
struct Fixture {
  std::string arch;  // "resnet18": torchvision's layout and block
  int num_layers;
  int64_t width;
  int64_t num_classes;
  std::string base;  // tests/fixtures/<base>.safetensors, <base>_reference.safetensors
  std::string state() const { return kFixtures + base + ".safetensors"; }
  std::string reference() const { return kFixtures + base + "_reference.safetensors"; }
};
const Fixture kResNet18{"resnet18", 18, 3, 10, "tv_resnet18_w3"};
const Fixture kResNet50{"resnet50", 50, 2, 7, "tv_resnet50_w2"};
constexpr int64_t kImage = 48;

// Thresholds of issue 11 (relative errors as defined at the top).
constexpr double kLogitsTol = 1e-4;
constexpr double kGradTol = 1e-3;
constexpr double kF16Tol = 1e-2;  // F16-rounded weights against the f32 reference

const net::PretrainedOptions kWithHead{.head_prefix = "fc.", .replace_head = false};

net::ResNetConfig config_of(int num_layers, int64_t width, int64_t classes, int64_t image = kImage) {
  net::ResNetConfig c;
  c.num_layers = num_layers;
  c.width = width;
  c.num_classes = classes;
  c.in_channels = 3;
  c.image_size = image;
  c.stem_kernel = 7;
  return c;
}
net::ResNetConfig config_of(const Fixture& f) { return config_of(f.num_layers, f.width, f.num_classes); }

// max|a - b| / max|b| (max|a - b| when b is all zeros); infinite when either
// holds a NaN or an infinity (std::max would drop a NaN silently).
double rel_err(const Tensor& a, const Tensor& b) {
  const auto va = a.to_double_vector(), vb = b.to_double_vector();
  REQUIRE(va.size() == vb.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (!std::isfinite(va[i]) || !std::isfinite(vb[i])) return HUGE_VAL;
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.to_double_vector() == b.to_double_vector();
}

const Tensor& get(const SafetensorsFile& f, const std::string& name) {
  const Tensor* t = f.find(name);
  REQUIRE_MESSAGE(t, "fixture has no tensor " << name);
  return *t;
}

std::string meta(const SafetensorsFile& f, const std::string& key) {
  const auto it = f.metadata.find(key);
  return it == f.metadata.end() ? "?" : it->second;
}

std::string fmt(double v) {
  std::ostringstream s;
  s.precision(3);
  s << v;
  return s.str();
}

int64_t count_if_name(const SafetensorsFile& f, const std::string& suffix) {
  return std::count_if(f.tensors.begin(), f.tensors.end(), [&](const auto& e) {
    return e.first.size() >= suffix.size() && e.first.compare(e.first.size() - suffix.size(), suffix.size(), suffix) == 0;
  });
}

Tensor eval_logits(net::ResNet& model, const Tensor& input) {
  model.eval();
  NoGradGuard no_grad;
  return model(input);
}

using ember::testing::python_torch;

// ---- safetensors bytes, edited: the 8-byte length, the JSON header, the data.
struct RawFile {
  std::string header;
  std::vector<uint8_t> data;
};
RawFile split(const std::vector<uint8_t>& bytes) {
  REQUIRE(bytes.size() >= 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(bytes[size_t(i)]) << (8 * i);
  REQUIRE(8 + n <= bytes.size());
  RawFile f;
  f.header.assign(bytes.begin() + 8, bytes.begin() + 8 + long(n));
  f.data.assign(bytes.begin() + 8 + long(n), bytes.end());
  return f;
}
std::vector<uint8_t> join(RawFile f, int64_t length_delta = 0) {
  while (f.header.back() == ' ') f.header.pop_back();
  f.header.append((8 - f.header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + f.header.size() + f.data.size());
  const uint64_t n = uint64_t(int64_t(f.header.size()) + length_delta);
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
  std::memcpy(out.data() + 8, f.header.data(), f.header.size());
  if (!f.data.empty()) std::memcpy(out.data() + 8 + f.header.size(), f.data.data(), f.data.size());
  return out;
}
// The JSON text of `field` ("dtype", "data_offsets") in tensor `name`'s entry:
// its position in the header and its length.
std::pair<size_t, size_t> find_field(const std::string& header, const std::string& name, const std::string& field) {
  const size_t entry = header.find("\"" + name + "\":{");
  REQUIRE_MESSAGE(entry != std::string::npos, "no entry " << name);
  const size_t at = header.find("\"" + field + "\":", entry);
  REQUIRE(at != std::string::npos);
  const size_t begin = at + field.size() + 3;
  const size_t end = header.find_first_of(",}", header[begin] == '[' ? header.find(']', begin) : begin);
  return {begin, end - begin};
}

// The message of the ember::Error loading `path` throws; checks that it is one
// line naming the file and holding every part.
std::string load_error(const std::string& path, net::Module& model, const std::vector<std::string>& parts,
                       const net::PretrainedOptions& options = kWithHead) {
  const std::string msg = error_of([&] { net::load_pretrained(path, model, options); });
  INFO("message: " << msg);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(contains(msg, path));
  for (const std::string& p : parts) CHECK_MESSAGE(contains(msg, p), "missing '" << p << "'");
  return msg;
}

// Everything PyTorch computed for one narrow net, against ember running in
// `dtype`: f32 within issue 11's tolerances; f64 within kF64Tol, which only the
// F32 rounding of the stored references limits. Narrow Bottleneck nets in train
// mode on small batches are ill-conditioned in f32 (PyTorch's own f32
// gradients are off by 1.5e-4 here, and by up to 1e-2 for other seeds and
// batches: see the generator), so the f64 run is what shows that the
// train-mode computation is exact.
constexpr double kF64Tol = 1e-6;

void check_against_pytorch(const Fixture& fx, DType dtype) {
  const double logits_tol = dtype == DType::f64 ? kF64Tol : kLogitsTol;
  const double grad_tol = dtype == DType::f64 ? kF64Tol : kGradTol;
  const SafetensorsFile state = load_safetensors(fx.state());
  const SafetensorsFile ref = load_safetensors(fx.reference());
  Generator gen(0);
  net::ResNetConfig config = config_of(fx);
  config.dtype = dtype;
  net::ResNet model(config, gen);
  const net::PretrainedReport report = net::load_pretrained(state, fx.state(), model, kWithHead);
  const int64_t floats = int64_t(state.tensors.size()) - count_if_name(state, "num_batches_tracked");
  CHECK(report.loaded == int64_t(model.state().size()));
  CHECK(report.loaded == int64_t(state.tensors.size()));
  CHECK(report.converted == (dtype == DType::f32 ? 0 : floats));
  CHECK(report.head_skipped.empty());
  CHECK(report.missing_batch_counters == 0);
  CHECK_FALSE(report.stripped_module_prefix);
  for (auto& [name, t] : model.state()) {
    CAPTURE(name);
    CHECK(t->to_double_vector() == get(state, name).to_double_vector());
  }
  const Tensor input = dtype == DType::f32 ? get(ref, "input") : ops::cast(get(ref, "input"), dtype);

  const double eval_err = rel_err(eval_logits(model, input), get(ref, "eval_logits"));
  CHECK(eval_err < logits_tol);

  model.train();
  const Tensor logits = model(input);
  const double train_err = rel_err(logits, get(ref, "train_logits"));
  CHECK(train_err < logits_tol);
  const Tensor loss = ops::cross_entropy(logits, get(ref, "labels"), 0.0);
  const double loss_err = std::abs(loss.item() - get(ref, "loss").item()) / std::abs(get(ref, "loss").item());
  CHECK(loss_err < logits_tol);
  loss.backward();

  double grad_err = 0;
  std::string grad_worst;
  int64_t grads = 0;
  for (const auto& p : model.named_parameters()) {
    CAPTURE(p.name);
    const Tensor g = p.tensor->grad();
    REQUIRE(g.defined());
    const double e = rel_err(g, get(ref, "grad." + p.name));
    CHECK(e < grad_tol);
    if (e > grad_err) grad_err = e, grad_worst = p.name;
    ++grads;
  }
  int64_t ref_grads = 0;
  for (const auto& [name, t] : ref.tensors) ref_grads += name.rfind("grad.", 0) == 0;
  CHECK(grads == ref_grads);

  double stat_err = 0;
  int64_t counters = 0;
  for (const auto& b : model.named_buffers()) {
    CAPTURE(b.name);
    const Tensor& want = get(ref, "after_forward." + b.name);
    if (b.tensor->dtype() == DType::i64) {
      CHECK(b.tensor->item() == want.item());
      CHECK(b.tensor->item() == get(state, b.name).item() + 1);
      ++counters;
      continue;
    }
    const double e = rel_err(*b.tensor, want);
    CHECK(e < logits_tol);
    stat_err = std::max(stat_err, e);
  }
  CHECK(counters == count_if_name(state, "num_batches_tracked"));

  std::string torch_f32;
  if (dtype == DType::f32)
    torch_f32 = "; PyTorch's own f32: eval " + meta(ref, "torch_f32_eval_rel_err") + ", train " +
                meta(ref, "torch_f32_train_rel_err") + ", loss " + meta(ref, "torch_f32_loss_rel_err") +
                ", gradients " + meta(ref, "torch_f32_grad_rel_err") + ", statistics " +
                meta(ref, "torch_f32_stats_rel_err");
  MESSAGE(fx.base << " (" << model.describe() << ") in " << std::string(dtype_name(dtype))
                  << ", relative errors against PyTorch (f64, stored as F32): eval logits " << fmt(eval_err)
                  << ", train logits " << fmt(train_err) << ", loss " << fmt(loss_err) << ", gradients "
                  << fmt(grad_err) << " (worst " << grad_worst << ", " << grads << " parameters), running statistics "
                  << fmt(stat_err) << torch_f32);
}

}  // namespace parity_test

using namespace parity_test;

TEST_CASE("torchvision parity: resnet18 layout (BasicBlock): eval/train logits, loss, gradients, BN statistics") {
  check_against_pytorch(kResNet18, DType::f32);
  check_against_pytorch(kResNet18, DType::f64);
}

TEST_CASE("torchvision parity: resnet50 layout (Bottleneck): eval/train logits, loss, gradients, BN statistics") {
  check_against_pytorch(kResNet50, DType::f32);
  check_against_pytorch(kResNet50, DType::f64);
}

TEST_CASE("torchvision parity: F32, F16, counter-less and module.-prefixed state files load alike") {
  const SafetensorsFile ref = load_safetensors(kResNet18.reference());
  const Tensor& input = get(ref, "input");
  struct Variant {
    std::string suffix;
    net::PretrainedReport report;
    Tensor logits;
    std::vector<double> counters;  // num_batches_tracked after loading, model order
  };
  std::vector<Variant> v(4);
  v[0].suffix = "", v[1].suffix = "_f16", v[2].suffix = "_no_counters", v[3].suffix = "_module";
  int64_t total = 0;
  for (Variant& x : v) {
    Generator gen(0);
    net::ResNet model(config_of(kResNet18), gen);
    total = int64_t(model.state().size());
    x.report = net::load_pretrained(kFixtures + kResNet18.base + x.suffix + ".safetensors", model, kWithHead);
    for (const auto& b : model.named_buffers())
      if (b.tensor->dtype() == DType::i64) x.counters.push_back(b.tensor->item());
    x.logits = eval_logits(model, input);
  }
  const SafetensorsFile f32 = load_safetensors(kResNet18.state());
  const SafetensorsFile f16 = load_safetensors(kFixtures + kResNet18.base + "_f16.safetensors");
  const int64_t n_counters = count_if_name(f32, "num_batches_tracked");
  CHECK(n_counters == 20);  // bn1, 2 per block x 8, 3 projection shortcuts
  int64_t n_f16 = 0;
  for (const auto& [name, t] : f16.tensors) n_f16 += t.dtype() == DType::f16;
  CHECK(n_f16 == total - n_counters);

  const Variant &a = v[0], &b = v[1], &c = v[2], &d = v[3];
  // (a) F32 with num_batches_tracked: the plain case.
  CHECK(a.report.loaded == total);
  CHECK(a.report.converted == 0);
  CHECK(a.report.converted_from.empty());
  CHECK_FALSE(a.report.stripped_module_prefix);
  CHECK(a.report.missing_batch_counters == 0);
  CHECK(a.report.head_skipped.empty());
  const double a_err = rel_err(a.logits, get(ref, "eval_logits"));
  CHECK(a_err < kLogitsTol);
  // (b) F16: every float tensor converted, counters (I64) copied as they are.
  CHECK(b.report.loaded == total);
  CHECK(b.report.converted == n_f16);
  CHECK(b.report.converted_from == "F16");
  CHECK(contains(b.report.describe(), "F16"));
  CHECK_FALSE(b.report.stripped_module_prefix);
  CHECK(b.report.missing_batch_counters == 0);
  CHECK(b.counters == a.counters);
  const double b_err16 = rel_err(b.logits, get(ref, "eval_logits_f16_weights"));
  const double b_err32 = rel_err(b.logits, get(ref, "eval_logits"));
  CHECK(b_err16 < kLogitsTol);  // the f16 values convert exactly
  CHECK(b_err32 < kF16Tol);
  // (c) no num_batches_tracked: the 20 counters stay 0, nothing else changes.
  CHECK(c.report.loaded == total - n_counters);
  CHECK(c.report.missing_batch_counters == n_counters);
  CHECK(c.report.converted == 0);
  CHECK(c.counters == std::vector<double>(size_t(n_counters), 0.0));
  CHECK(rel_err(c.logits, a.logits) == 0.0);
  // (d) DataParallel's "module." prefix is dropped.
  CHECK(d.report.loaded == total);
  CHECK(d.report.stripped_module_prefix);
  CHECK(d.report.missing_batch_counters == 0);
  CHECK(d.counters == a.counters);
  CHECK(rel_err(d.logits, a.logits) == 0.0);
  MESSAGE("tv_resnet18_w3 eval logits, relative errors: F32 file " << fmt(a_err) << "; F16 file " << fmt(b_err16)
          << " against PyTorch on the F16-rounded weights, " << fmt(b_err32) << " against the F32 reference (PyTorch's "
          << meta(ref, "torch_f32_f16_weights_vs_f32_eval_rel_err") << "); no counters and module. prefix: "
          << "identical to F32; reports: \"" << b.report.describe() << "\", \"" << c.report.describe() << "\", \""
          << d.report.describe() << "\"");
}

TEST_CASE("torchvision parity: a replaced head keeps the model's fresh fc, everything else is loaded") {
  const SafetensorsFile ref = load_safetensors(kResNet18.reference());
  Generator g1(7), g2(7);
  net::ResNet fresh(config_of(kResNet18.num_layers, kResNet18.width, 5), g1);
  net::ResNet model(config_of(kResNet18.num_layers, kResNet18.width, 5), g2);
  const net::PretrainedReport r = net::load_pretrained(kResNet18.state(), model);  // replace_head by default
  CHECK(r.head_skipped == std::vector<std::string>{"fc.bias", "fc.weight"});
  CHECK(r.loaded == int64_t(model.state().size()) - 2);
  CHECK(same_values(model.fc->weight, fresh.fc->weight));
  CHECK(same_values(model.fc->bias, fresh.fc->bias));
  CHECK(same_values(model.conv1->weight, get(load_safetensors(kResNet18.state()), "conv1.weight")));
  CHECK(eval_logits(model, get(ref, "input")).shape() == Shape{4, 5});
}

TEST_CASE("torchvision parity: infer_resnet_config reads depth, width, stem, channels and classes") {
  const net::InferredResNet r18 = net::infer_resnet_config(load_safetensors(kResNet18.state()), kResNet18.state());
  CHECK(r18.num_layers == 18);
  CHECK(r18.width == 3);
  CHECK(r18.stem_kernel == 7);
  CHECK(r18.in_channels == 3);
  CHECK(r18.num_classes == 10);
  CHECK_FALSE(r18.bottleneck);
  const std::string module = kFixtures + kResNet18.base + "_module.safetensors";
  CHECK(net::infer_resnet_config(load_safetensors(module), module).num_layers == 18);
  const net::InferredResNet r50 = net::infer_resnet_config(load_safetensors(kResNet50.state()), kResNet50.state());
  CHECK(r50.num_layers == 50);
  CHECK(r50.width == 2);
  CHECK(r50.stem_kernel == 7);
  CHECK(r50.in_channels == 3);
  CHECK(r50.num_classes == 7);
  CHECK(r50.bottleneck);
}

TEST_CASE("torchvision parity: save_model writes torchvision's state_dict names, shapes, dtypes and values") {
  for (const Fixture& fx : {kResNet18, kResNet50}) {
    CAPTURE(fx.base);
    Generator gen(0);
    net::ResNet model(config_of(fx), gen);
    net::load_pretrained(fx.state(), model, kWithHead);
    TempDir dir;
    const std::string path = dir.file("ember.safetensors");
    net::save_model(path, model);
    const SafetensorsFile saved = load_safetensors(path), want = load_safetensors(fx.state());
    std::map<std::string, std::string> got_layout, want_layout;
    for (const auto& [name, t] : saved.tensors) got_layout[name] = std::string(dtype_name(t.dtype())) + " " + t.shape().str();
    for (const auto& [name, t] : want.tensors) want_layout[name] = std::string(dtype_name(t.dtype())) + " " + t.shape().str();
    CHECK(got_layout == want_layout);
    for (const auto& [name, t] : want.tensors) {
      CAPTURE(name);
      const Tensor* s = saved.find(name);
      REQUIRE(s);
      CHECK(same_values(*s, t));
    }
  }
}

namespace {

// ember's checkpoint of each narrow fixture model (after a train-mode forward, so that its statistics and
// counters are ember's own) through `python` tests/fixtures/check_strict_load.py: PyTorch's
// load_state_dict(strict=True) and its f64 eval logits against ember's.
void check_strict_load(const std::string& python, const std::string& must_say) {
  for (const Fixture& fx : {kResNet18, kResNet50}) {
    CAPTURE(fx.base);
    const SafetensorsFile ref = load_safetensors(fx.reference());
    Generator gen(0);
    net::ResNet model(config_of(fx), gen);
    net::load_pretrained(fx.state(), model, kWithHead);
    {  // one train-mode forward, so that the saved statistics and counters are ember's own
      model.train();
      NoGradGuard no_grad;
      model(get(ref, "input"));
    }
    const Tensor logits = eval_logits(model, get(ref, "input"));
    TempDir dir;
    net::save_model(dir.file("ember.safetensors"), model);
    save_safetensors(dir.file("logits.safetensors"), {{"logits", logits}});
    std::string out;
    const int rc = ember::testing::process::run_command(
        {python, kFixtures + "check_strict_load.py", fx.arch, std::to_string(fx.width), std::to_string(fx.num_classes),
         dir.file("ember.safetensors"), dir.file("logits.safetensors"), fx.reference()},
        180, dir.path.string(), "check", &out);
    INFO("check_strict_load.py: " << out);
    CHECK(rc == 0);
    CHECK(contains(out, "load_state_dict(strict=True) took"));
    CHECK(contains(out, must_say));
    MESSAGE(fx.base << ": " << out.substr(0, out.find('\n')));
  }
}

}  // namespace

TEST_CASE("torchvision parity: PyTorch load_state_dict(strict=True) takes ember's file and gives ember's logits" *
          ember::testing::kNeedsPythonTorch) {
  std::string why;
  REQUIRE_MESSAGE(ember::testing::python_torch(&why), why);
  check_strict_load(kPython, "file read by");
}

TEST_CASE("torchvision parity: PyTorch 2.x reads ember's file with the official safetensors, strict, same logits" *
          ember::testing::kNeedsTorchRefs) {
  check_strict_load(ember::testing::torch_refs_python(), "file read by safetensors 0.4.5");
}

TEST_CASE("torchvision parity: full-size torchvision resnet18 and resnet50 give PyTorch's eval logits" *
          ember::testing::kNeedsPythonTorch) {
  std::string why;
  REQUIRE_MESSAGE(ember::testing::python_torch(&why), why);
  const std::string full_dir = ember::testing::full_size_fixtures();
  for (int layers : {18, 50}) {
    CAPTURE(layers);
    const std::string base = full_dir + "/tv_full_resnet" + std::to_string(layers);
    const SafetensorsFile state = load_safetensors(base + ".safetensors");
    const SafetensorsFile ref = load_safetensors(base + "_reference.safetensors");
    const net::InferredResNet inferred = net::infer_resnet_config(state, base + ".safetensors");
    CHECK(inferred.num_layers == layers);
    CHECK(inferred.width == 64);
    CHECK(inferred.stem_kernel == 7);
    CHECK(inferred.num_classes == 1000);
    net::ResNetConfig c = config_of(layers, 0, 1000, 224);  // width 0: torchvision's 64
    Generator gen(0);
    net::ResNet model(c, gen);
    const net::PretrainedReport r = net::load_pretrained(state, base + ".safetensors", model, kWithHead);
    CHECK(r.loaded == int64_t(model.state().size()));
    const double err = rel_err(eval_logits(model, get(ref, "input")), get(ref, "eval_logits"));
    CHECK(err < kLogitsTol);
    MESSAGE("torchvision resnet" << layers << " (" << model.describe() << "), 2x3x224x224: eval logits relative error "
                                 << fmt(err) << " (PyTorch's own f32: " << meta(ref, "torch_f32_eval_rel_err") << ")");
  }
}

TEST_CASE("torchvision parity: wrong depth and width are refused with one line naming every mismatch") {
  // resnet18's names are a subset of resnet34's and resnet50's: what is absent is listed as missing.
  {
    Generator gen(0);
    net::ResNet r34(config_of(34, kResNet18.width, kResNet18.num_classes), gen);
    const Tensor before = r34.conv1->weight.clone();
    const std::string msg =
        load_error(kResNet18.state(), r34, {"does not fit the model", "missing (", "layer1.2.", "check --num-layers"});
    CHECK_FALSE(contains(msg, "unexpected"));
    CHECK(same_values(r34.conv1->weight, before));  // the model is left untouched
    MESSAGE("resnet18 file into resnet34: " << msg);
  }
  {
    Generator gen(0);
    net::ResNet r50(config_of(50, kResNet18.width, kResNet18.num_classes), gen);
    const std::string msg = load_error(kResNet18.state(), r50, {"missing (", "conv3.weight", "with another shape ("});
    MESSAGE("resnet18 file into resnet50: " << msg);
  }
  // resnet50's file into resnet18: its extra blocks and conv3s are unexpected.
  {
    Generator gen(0);
    net::ResNet r18(config_of(18, kResNet50.width, kResNet50.num_classes), gen);
    const std::string msg = load_error(kResNet50.state(), r18, {"unexpected (", "with another shape ("});
    MESSAGE("resnet50 file into resnet18: " << msg);
  }
  // One tensor renamed: both lists in one line.
  {
    TempDir dir;
    RawFile f = split(read_file(kResNet18.state()));
    const size_t at = f.header.find("\"layer3.1.bn2.running_var\"");
    REQUIRE(at != std::string::npos);
    f.header.replace(at, 26, "\"layer3.1.bn2.running_vax\"");
    const std::string path = dir.file("renamed.safetensors");
    write_bytes(path, join(f));
    Generator gen(0);
    net::ResNet model(config_of(kResNet18), gen);
    const std::string msg = load_error(path, model,
                                       {"1 missing (layer3.1.bn2.running_var)", "1 unexpected (layer3.1.bn2.running_vax)"});
    MESSAGE("one tensor renamed: " << msg);
  }
  // Width 3 into width 4: the shape mismatch names the tensor and both shapes.
  {
    Generator gen(0);
    net::ResNet wide(config_of(18, 4, kResNet18.num_classes), gen);
    const std::string msg =
        load_error(kResNet18.state(), wide, {"with another shape (", "conv1.weight (file [3, 3, 7, 7], model [4, 3, 7, 7])"});
    CHECK_FALSE(contains(msg, "missing"));
    MESSAGE("width 3 file into width 4: " << msg);
  }
  // A float tensor stored as I32 (same size): another dtype, not converted.
  {
    TempDir dir;
    RawFile f = split(read_file(kResNet18.state()));
    const auto [pos, len] = find_field(f.header, "bn1.running_mean", "dtype");
    REQUIRE(f.header.substr(pos, len) == "\"F32\"");
    f.header.replace(pos, len, "\"I32\"");
    const std::string path = dir.file("int_stats.safetensors");
    write_bytes(path, join(f));
    Generator gen(0);
    net::ResNet model(config_of(kResNet18), gen);
    const std::string msg = load_error(path, model, {"with another dtype (bn1.running_mean (file i32, model f32))"});
    MESSAGE("float tensor stored as I32: " << msg);
  }
}

TEST_CASE("torchvision parity: hostile files are refused by load_pretrained with one line naming the file") {
  const std::vector<uint8_t> good = read_file(kResNet18.state());
  TempDir dir;
  Generator gen(0);
  net::ResNet model(config_of(kResNet18), gen);
  const Tensor before = model.conv1->weight.clone();
  int n = 0;
  auto refuse = [&](const std::vector<uint8_t>& bytes, const std::vector<std::string>& parts, const std::string& what) {
    const std::string path = dir.file("hostile" + std::to_string(n++) + ".safetensors");
    write_bytes(path, bytes);
    const std::string msg = load_error(path, model, parts);
    MESSAGE(what << ": " << msg);
  };
  // Truncated: the data section ends early.
  refuse(std::vector<uint8_t>(good.begin(), good.end() - 1000), {"go past the end of the data section"}, "truncated");
  // The header length lies: longer than the file, then 8 bytes too long (into the data).
  {
    std::vector<uint8_t> b = good;
    const uint64_t huge = good.size() + 100;
    for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(huge >> (8 * i));
    refuse(b, {}, "header length past the end of the file");
    refuse(join(split(good), 8), {}, "header length 8 bytes too long");
    refuse(join(split(good), -8), {}, "header length 8 bytes too short");
  }
  // Overlapping data: bn1.running_var claims bn1.running_mean's bytes.
  {
    RawFile f = split(good);
    const auto [mpos, mlen] = find_field(f.header, "bn1.running_mean", "data_offsets");
    const std::string mean_offsets = f.header.substr(mpos, mlen);
    const auto [vpos, vlen] = find_field(f.header, "bn1.running_var", "data_offsets");
    f.header.replace(vpos, vlen, mean_offsets);
    refuse(join(f), {"overlap tensor \"bn1.running_mean\""}, "overlapping data offsets");
  }
  // Dtypes ember does not read.
  for (const std::string dtype : {"F8_E5M2", "Q4"}) {
    RawFile f = split(good);
    const auto [pos, len] = find_field(f.header, "conv1.weight", "dtype");
    f.header.replace(pos, len, "\"" + dtype + "\"");
    refuse(join(f), {"\"conv1.weight\"", "dtype \"" + dtype + "\" is not supported"}, "dtype " + dtype);
  }
  CHECK(same_values(model.conv1->weight, before));
}
