// tests/apps/test_predict_mxnet.cpp — MXNet 1.9.1's own ResNet files through
// build/predict and build/finetune_resnet, against MXNet itself.
//
// scripts/refs/mxnet_models.py (run with the reference environment's Python,
// make refs; else the tests are skipped with that reason) makes, once per
// test process, with random weights MXNet creates, calibrates and saves:
// the symbolic pre-activation ResNet-50 and ResNet-152 of resnet.py
// (prefix-symbol.json + prefix-0000.params), Gluon's resnet18_v1 and
// resnet50_v1 (save_parameters), a one-channel resnet.py ResNet-20 for
// 28x28 input, a photo, and MXNet's float64 softmax of each net on the photo
// preprocessed exactly as build/predict does (tests/fixtures/ember_crop.py).
//   predict: ember's f32 forward against MXNet's f64 one: the same top-5
//   order, and max |dp| < 1e-5 (the bound the torchvision comparison holds)
//   for ResNet-18/20, < 5e-5 for the 50- and 152-layer nets. Random weights
//   make these nets sensitive: a 1-ulp change of the f32 input moves their
//   probabilities by ~1e-5, and MXNet's own f32 forward is printed beside
//   ember's (figures: docs/benchmarks.md#mxnet-models; ember in f64 agrees
//   with MXNet in f64 to 1e-14).
//   The BEEVA flow: finetune_resnet from the MXNet ResNet-20 checkpoint on
//   Fashion-MNIST classes 5-9 in one command, --export-mxnet writing the
//   result back; the fine-tuned model must learn (validation >= 0.85), and
//   MXNet's mx.model.load_checkpoint of the export must give ember's
//   probabilities. The same for a Gluon resnet18_v1 fine-tuned on a few
//   photo-like images, loaded by Gluon's strict load_parameters.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "data/image.h"
#include "engine/file_io.h"
#include "net/json.h"
#include "tests/support/refs_env.h"
#include "tests/support/photo_like.h"
#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"

namespace predict_mxnet_test {

using namespace ember;
using namespace ember::testing;
using namespace ember::testing::process;

constexpr double kTol = 1e-5;      // max |dp|, ember f32 against MXNet f64 on the same input: 18/20 layers
constexpr double kDeepTol = 5e-5;  // 50 and 152 layers

std::string program(const std::string& name) { return binary_dir() + "/" + name; }

std::string text_of(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  return std::string(b.begin(), b.end());
}

// Runs argv to completion; REQUIREs exit 0; returns stdout + stderr.
std::string run_ok(const std::vector<std::string>& argv, const std::string& dir, const std::string& name,
                   double seconds = 300) {
  std::string out;
  const int rc = run_command(argv, seconds, dir, name, &out);
  REQUIRE_MESSAGE(rc == 0, name << " exited " << rc << ":\n" << out.substr(0, 4000));
  return out;
}

// The nets and MXNet's readings, made once per test process.
struct Models {
  TempDir dir;
  std::map<std::string, std::vector<double>> probs;  // reference.json's, per net
  std::map<std::string, double> mxnet_f32;           // MXNet's own f32 max |dp| against them
  std::string file(const std::string& name) const { return dir.file(name); }
};

const Models& models() {
  static std::unique_ptr<Models> m;
  if (!m) {
    m = std::make_unique<Models>();
    run_ok({mxnet_refs_python(), "scripts/refs/mxnet_models.py", "make", m->dir.path.string(), "preact50", "preact152",
            "gluon18", "gluon50", "preact20"},
           m->dir.path.string(), "mxnet_models", 600);
    const json::Value ref = json::parse(text_of(m->file("reference.json")));
    for (const auto& [name, v] : ref.as_object()) {
      REQUIRE(v.find("dtype")->as_string() == "float64");
      std::vector<double>& p = m->probs[name];
      for (const json::Value& x : v.find("probs")->as_array()) p.push_back(x.as_number());
      m->mxnet_f32[name] = v.find("float32_max_abs_diff")->as_number();
    }
  }
  return *m;
}

// Every class's probability from build/predict --top-k K --json 1 on one image.
std::vector<double> predict_probs(const std::vector<std::string>& args, int64_t classes, const std::string& dir) {
  std::vector<std::string> argv{program("predict"), "--top-k", std::to_string(classes), "--json", "1"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = run_ok(argv, dir, "predict", 120);
  const size_t line = out.find("{\"path\"");
  REQUIRE_MESSAGE(line != std::string::npos, out);
  const json::Value v = json::parse(out.substr(line, out.find('\n', line) - line));
  std::vector<double> p(size_t(classes), -1.0);
  for (const json::Value& t : v.find("top")->as_array()) p[size_t(t.find("index")->as_int())] = t.find("prob")->as_number();
  for (double x : p) REQUIRE(x >= 0);
  return p;
}

// MXNet's probabilities for a parameter file (mxnet_models.py check).
std::vector<double> mxnet_probs(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> argv{mxnet_refs_python(), "scripts/refs/mxnet_models.py", "check"};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::string out = run_ok(argv, dir, "mxnet_check", 120);
  const size_t line = out.find("{\"probs\"");
  REQUIRE_MESSAGE(line != std::string::npos, out);
  const json::Value v = json::parse(out.substr(line, out.find('\n', line) - line));
  REQUIRE(v.find("dtype")->as_string() == "float64");
  std::vector<double> p;
  for (const json::Value& x : v.find("probs")->as_array()) p.push_back(x.as_number());
  return p;
}

std::vector<int> top5(const std::vector<double>& p) {
  std::vector<int> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int a, int b) { return p[size_t(a)] > p[size_t(b)]; });
  return {order.begin(), order.begin() + 5};
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

void check_same(const std::string& what, const std::vector<double>& ember, const std::vector<double>& mxnet,
                double bound = kTol, const std::string& context = "") {
  const double d = max_abs_diff(ember, mxnet);
  CAPTURE(what);
  CHECK(d < bound);
  if (ember.size() >= 5) CHECK(top5(ember) == top5(mxnet));
  const int top = int(std::max_element(ember.begin(), ember.end()) - ember.begin());
  MESSAGE(what << ": max |dp| " << d << " (bound " << bound << context << "), top class " << top << " p "
               << ember[size_t(top)]);
}

}  // namespace predict_mxnet_test

using namespace predict_mxnet_test;

TEST_CASE("predict: MXNet 1.9.1's own ResNets (resnet.py symbolic 50/152, Gluon v1 18/50) give MXNet's probabilities" *
          kNeedsMxnetRefs) {
  const Models& m = models();
  const TempDir work;
  struct Net {
    const char* name;
    const char* file;
    double bound;
  };
  for (const Net& n : {Net{"preact50", "preact50-0000.params", kDeepTol}, Net{"preact152", "preact152-0000.params", kDeepTol},
                       Net{"gluon18", "gluon18.params", kTol}, Net{"gluon50", "gluon50.params", kDeepTol}})
    check_same(n.name, predict_probs({"--model", m.file(n.file), m.file("photo.png")}, 1000, work.path.string()),
               m.probs.at(n.name), n.bound, cat("; MXNet's own f32: ", m.mxnet_f32.at(n.name)));
  // A one-channel 28x28 resnet.py net: its stem is 3x3 without batch norm or pool, its input raw pixels.
  check_same("preact20 (1x28x28)",
             predict_probs({"--model", m.file("preact20-0000.params"), "--image-size", "28", m.file("photo_grey.png")},
                           10, work.path.string()),
             m.probs.at("preact20"));
}

TEST_CASE("finetune_resnet: an MXNet checkpoint fine-tuned on new classes in one command, written back for MXNet" *
          kNeedsMxnetRefs) {
  const Models& m = models();
  const TempDir work;
  const std::string w = work.path.string();
  const std::string log = run_ok(
      {program("finetune_resnet"), "--pretrained-model", m.file("preact20-0000.params"), "--classes", "5,6,7,8,9",
       "--num-examples", "3000", "--num-val-examples", "1000", "--num-epochs", "2", "--batch-size", "64", "--lr",
       "0.05", "--seed", "1", "--model-prefix", work.file("ft"), "--export-mxnet", work.file("ft-0002.params")},
      w, "finetune");
  INFO(log);
  CHECK(log.find("ResNet-20 (mxnet-preact, basic blocks") != std::string::npos);
  CHECK(log.find("exported " + work.file("ft-0002.safetensors") + " as MXNet symbolic resnet.py parameters: " +
                 work.file("ft-0002.params") + " and " + work.file("ft-symbol.json")) != std::string::npos);
  CHECK(final_validation(log) >= 0.85);
  // MXNet's load_checkpoint of the pair, ember on its own checkpoint and on the export: one model.
  const std::vector<double> mx =
      mxnet_probs({"checkpoint", work.file("ft-0002.params"), "5", "20", m.file("photo_grey.png"), "1,28,28"}, w);
  const std::vector<std::string> input{"--image-size", "28", "--resize", "32", m.file("photo_grey.png")};
  std::vector<std::string> args{"--model", work.file("ft-0002.safetensors")};
  args.insert(args.end(), input.begin(), input.end());
  check_same("fine-tuned checkpoint vs MXNet's load_checkpoint of the export", predict_probs(args, 5, w), mx);
  args[1] = work.file("ft-0002.params");
  check_same("the export read back by ember", predict_probs(args, 5, w), mx);
}

TEST_CASE("finetune_resnet: a Gluon resnet18_v1 fine-tuned and written back loads into Gluon with the same outputs" *
          kNeedsMxnetRefs) {
  const Models& m = models();
  const TempDir work;
  const std::string w = work.path.string();
  // 24 photo-like 64x64 images in 2 class folders, packed by im2rec.
  for (int i = 0; i < 24; ++i) {
    const std::string folder = work.file(std::string("photos_src/") + (i % 2 ? "b" : "a"));
    std::filesystem::create_directories(folder);
    std::vector<uint8_t> png;
    data::encode_png(photo_like_image(64, 64, 3, uint64_t(100 + i)), png);
    write_file_atomic(folder + "/" + std::to_string(i) + ".png", png.data(), png.size());
  }
  run_ok({program("im2rec"), "--shuffle", "0", work.file("photos"), work.file("photos_src")}, w, "im2rec");
  const std::string log =
      run_ok({program("finetune_resnet"), "--pretrained-model", m.file("gluon18.params"), "--data-train",
              work.file("photos.erec"), "--image-shape", "3,64,64", "--num-epochs", "1", "--batch-size", "8", "--lr",
              "0.01", "--model-prefix", work.file("g"), "--export-mxnet", work.file("g-tuned.params")},
             w, "finetune_gluon");
  INFO(log);
  CHECK(log.find("ResNet-18 (gluon-v1, basic blocks") != std::string::npos);
  CHECK(log.find("as MXNet Gluon resnet_v1 parameters: " + work.file("g-tuned.params")) != std::string::npos);
  const std::vector<double> mx = mxnet_probs({"gluon", work.file("g-tuned.params"), "2", "18", m.file("photo.png")}, w);
  check_same("fine-tuned Gluon checkpoint vs Gluon's load_parameters of the export",
             predict_probs({"--model", work.file("g-0001.safetensors"), "--image-size", "224", "--resize", "256",
                            m.file("photo.png")},
                           2, w),
             mx);
}
