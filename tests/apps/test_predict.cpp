// tests/apps/test_predict.cpp — build/predict as users run it: the program (found
// next to this test binary) started as a process (tests/support/process_helpers.h)
// on small ResNets saved here with net::save_model and on JPEG/PNG files and
// record files written here. Its --json probabilities are compared with the
// same model run in this process on pixels preprocessed here straight from
// data/ (decode, validation crop box, bilinear resize), its --data-val
// accuracy with an evaluation here of every record; class names from
// --labels, the checkpoint metadata and the record file; the input
// normalisation from the metadata and from the flags; and the errors for a
// missing or corrupt image, a labels file of the wrong length and a
// --num-layers the file contradicts. Models are ResNet-18 of width 4 (a few
// thousand parameters), so the file takes a few seconds.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "data/augment_rrc.h"
#include "data/fashion_mnist.h"
#include "data/image.h"
#include "data/record_file.h"
#include "engine/autograd.h"
#include "engine/rng.h"
#include "net/checkpoint.h"
#include "net/json.h"
#include "net/resnet.h"
#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using ember::testing::contains;
using ember::testing::TempDir;
using ember::testing::write_bytes;
using namespace ember::testing::process;

std::string predict_program() {
  const std::string path = binary_dir() + "/predict";
  REQUIRE_MESSAGE(::access(path.c_str(), X_OK) == 0, path << " is missing: build it with `make all`");
  return path;
}

struct RunResult {
  int code = 0;
  std::string out, err;
};

// Runs build/predict with `args` (a 60 s bound).
RunResult run_predict(const std::vector<std::string>& args, const TempDir& dir) {
  static int n = 0;
  std::vector<std::string> argv{predict_program()};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p("predict" + std::to_string(n++), argv, {}, dir.path.string());
  const bool done = p.wait_for(60);
  REQUIRE_MESSAGE(done, "predict did not finish in 60 s: " << p.describe());
  return {p.exit_code(), p.out(), p.err()};
}

// A small model as train_resnet would leave it: ResNet-18 of width 4 with
// random weights, random batch-norm statistics, and a head scaled up so the
// probabilities are far from uniform. Built with the input normalisation
// predict is expected to use (it is not stored in the file).
std::unique_ptr<net::ResNet> make_model(int64_t channels, int64_t classes, int stem, const std::vector<double>& mean,
                                        const std::vector<double>& std, uint64_t seed,
                                        net::HeadPool pool = net::HeadPool::avg) {
  net::ResNetConfig cfg;
  cfg.pool = pool;
  cfg.num_layers = 18;
  cfg.width = 4;
  cfg.stem_kernel = stem;
  cfg.in_channels = channels;
  cfg.num_classes = classes;
  cfg.image_size = 224;
  cfg.input_norm.channels = int(channels);
  for (int c = 0; c < int(channels); ++c) {
    cfg.input_norm.mean[c] = float(mean[size_t(c)] / 255.0);
    cfg.input_norm.inv_std[c] = float(255.0 / std[size_t(c)]);
  }
  Generator gen(seed);
  auto model = std::make_unique<net::ResNet>(cfg, gen);
  PhiloxStream rng(seed, 11);
  for (auto& [name, t] : model->state()) {
    if (t->dtype() != DType::f32) continue;
    float* v = t->data<float>();
    const bool mean_buf = name.ends_with("running_mean"), var_buf = name.ends_with("running_var");
    for (int64_t i = 0; i < t->numel(); ++i) {
      const double u = double(rng.next_u32()) / 4294967296.0;
      if (mean_buf) v[i] = float(0.4 * u - 0.2);
      if (var_buf) v[i] = float(0.5 + 1.5 * u);
      if (name == "fc.weight") v[i] *= 4.0f;
    }
  }
  model->eval();
  return model;
}

std::string json_names(const std::vector<std::string>& names) {
  json::Array a;
  for (const auto& n : names) a.push_back(json::Value(n));
  return json::write(a);
}

// A colourful, smooth picture that differs per seed (JPEG keeps it recognisable).
data::Image picture(int h, int w, int c, uint64_t seed) {
  data::Image img;
  img.height = h, img.width = w, img.channels = c;
  PhiloxStream rng(seed, 5);
  double f[3][3];
  for (auto& row : f)
    for (double& x : row) x = 0.5 + 6.0 * double(rng.below(1000)) / 1000.0;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int ch = 0; ch < c; ++ch) {
        const double v = 128 + 60 * std::sin(f[ch][0] * x / w * 3.14159 + f[ch][1]) +
                         60 * std::cos(f[ch][2] * y / h * 3.14159 + f[ch][0] * double(x * y) / (w * h));
        img.pixels.push_back(uint8_t(std::clamp(v, 0.0, 255.0)));
      }
  return img;
}

std::vector<uint8_t> encoded(const data::Image& img, bool jpeg) {
  std::vector<uint8_t> b;
  if (jpeg) data::encode_jpeg(img, 90, b);
  else data::encode_png(img, b);
  return b;
}

// The validation preprocessing, straight from data/: what predict and the
// record loader must give for these bytes.
void preprocess_here(const std::vector<uint8_t>& bytes, int channels, int size, int resize, uint8_t* dst) {
  data::Image img;
  data::decode_image(bytes.data(), bytes.size(), channels, img, "test image");
  const data::Box box = data::validation_crop_box(img.height, img.width, size, resize);
  data::resize_to_planar(img, box, size, size, false, dst);
}

// Softmax probabilities (double) of each image of `pixels` ([n, C, size, size] u8).
std::vector<std::vector<double>> probabilities_here(net::ResNet& model, const std::vector<uint8_t>& pixels, int64_t n,
                                                    int64_t channels, int64_t size) {
  NoGradGuard no_grad;
  const Tensor x = Tensor::from_data(pixels.data(), {n, channels, size, size});
  const std::vector<double> logits = model(x).to_double_vector();
  const int64_t k = int64_t(logits.size()) / n;
  std::vector<std::vector<double>> out;
  for (int64_t i = 0; i < n; ++i) {
    const double* l = logits.data() + i * k;
    const double top = *std::max_element(l, l + k);
    double sum = 0;
    for (int64_t c = 0; c < k; ++c) sum += std::exp(l[c] - top);
    std::vector<double> p(static_cast<size_t>(k));
    for (int64_t c = 0; c < k; ++c) p[size_t(c)] = std::exp(l[c] - top) / sum;
    out.push_back(std::move(p));
  }
  return out;
}

// Class indices by decreasing probability (ties: lower index first).
std::vector<int64_t> ranking(const std::vector<double>& p) {
  std::vector<int64_t> order(p.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
  return order;
}

// Checks one --json line of predict against the probabilities computed here.
void check_json_line(const std::string& line, const std::string& path, const std::vector<double>& expected, size_t k,
                     const std::vector<std::string>& names) {
  INFO("line: ", line);
  const json::Value v = json::parse(line);
  REQUIRE(v.is_object());
  REQUIRE(v.find("path"));
  CHECK(v.find("path")->as_string() == path);
  REQUIRE(v.find("top"));
  const json::Array& top = v.find("top")->as_array();
  REQUIRE(top.size() == k);
  const std::vector<int64_t> order = ranking(expected);
  double previous = 2;
  for (size_t r = 0; r < k; ++r) {
    const int64_t index = top[r].find("index")->as_int();
    const double prob = top[r].find("prob")->as_number();
    CHECK(index == order[r]);
    REQUIRE(index >= 0);
    REQUIRE(index < int64_t(expected.size()));
    CHECK(std::abs(prob - expected[size_t(index)]) < 1e-5);
    CHECK(prob <= previous);
    previous = prob;
    const json::Value* name = top[r].find("name");
    REQUIRE(name);
    if (names.empty()) CHECK(name->is_null());
    else CHECK(name->as_string() == names[size_t(index)]);
  }
}

// Files of one test: a model, some images, expected probabilities.
struct ImageCase {
  TempDir dir;
  std::string model_path;
  std::vector<std::string> paths;
  std::vector<std::vector<double>> expected;  // per image
};

const std::vector<std::string> kNames = {"tabby cat", "dog \"rex\"", "back\\slash", "caf\xc3\xa9", "tab\there", "six"};

// Six classes, RGB, input statistics and class names in the metadata; five
// images (JPEG and PNG, landscape, portrait, smaller than the crop) whose
// expected probabilities use `mean`/`std` (the metadata's unless a test
// overrides them on the command line).
void make_image_case(ImageCase& c, const std::vector<double>& mean, const std::vector<double>& std,
                     std::map<std::string, std::string> metadata, int size = 224,
                     net::HeadPool pool = net::HeadPool::avg) {
  auto model = make_model(3, 6, 7, mean, std, 42, pool);
  c.model_path = c.dir.file("model.safetensors");
  net::save_model(c.model_path, *model, metadata);
  const int sizes[5][2] = {{375, 500}, {500, 375}, {120, 150}, {300, 300}, {231, 407}};
  std::vector<uint8_t> pixels;
  const int resize = data::validation_resize(size, 0);
  for (int i = 0; i < 5; ++i) {
    const bool jpeg = i % 2 == 0;
    const std::vector<uint8_t> bytes = encoded(picture(sizes[i][0], sizes[i][1], 3, uint64_t(i) + 1), jpeg);
    c.paths.push_back(c.dir.file("img" + std::to_string(i) + (jpeg ? ".jpg" : ".png")));
    write_bytes(c.paths.back(), bytes);
    pixels.resize(size_t(i + 1) * 3 * size_t(size) * size_t(size));
    preprocess_here(bytes, 3, size, resize, pixels.data() + size_t(i) * 3 * size_t(size) * size_t(size));
  }
  c.expected = probabilities_here(*model, pixels, 5, 3, size);
}

std::vector<std::string> with_images(std::vector<std::string> args, const std::vector<std::string>& images) {
  args.insert(args.end(), images.begin(), images.end());
  return args;
}

}  // namespace

TEST_CASE("predict: --json probabilities match the model run here; input stats and names from the checkpoint") {
  ImageCase c;
  const std::vector<double> mean{100, 110, 120}, std{50, 60, 70};
  make_image_case(c, mean, std,
                  {{"input_mean", "100.0,110.0,120.0"}, {"input_std", "50,60,70"}, {"class_names", json_names(kNames)}});
  // Batches of 2, 2 and 1.
  const RunResult r = run_predict(with_images({"--model", c.model_path, "--json", "1", "--top-k", "3", "--batch-size", "2"},
                                              c.paths),
                                  c.dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 5);
  for (size_t i = 0; i < 5; ++i) check_json_line(lines[i], c.paths[i], c.expected[i], 3, kNames);
  // The probabilities are not all alike: the test can tell the images apart.
  CHECK(ranking(c.expected[0]) != ranking(c.expected[1]));
  CHECK(contains(r.err, "checkpoint metadata"));
  CHECK(std::regex_search(r.err, std::regex(R"(Predicted 5 images in [0-9.]+ s: [0-9.]+ img/s)")));
}

TEST_CASE("predict: a concat-pool checkpoint (metadata pool=concat) gives the model's probabilities; a bad pool is one line") {
  ImageCase c;
  const std::vector<double> mean{100, 110, 120}, std{50, 60, 70};
  make_image_case(c, mean, std, {{"input_mean", "100,110,120"}, {"input_std", "50,60,70"}, {"pool", "concat"}}, 96,
                  net::HeadPool::concat);
  RunResult r = run_predict(with_images({"--model", c.model_path, "--json", "1", "--image-size", "96"}, c.paths), c.dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 5);
  for (size_t i = 0; i < 5; ++i) check_json_line(lines[i], c.paths[i], c.expected[i], 5, {});
  CHECK(contains(r.err, "concat pool"));

  // The same weights under another "pool": one line naming the file and the value.
  auto model = make_model(3, 6, 7, mean, std, 42, net::HeadPool::concat);
  const std::string bad = c.dir.file("bad.safetensors");
  net::save_model(bad, *model, {{"pool", "max"}});
  r = run_predict({"--model", bad, c.paths[0]}, c.dir);
  CHECK(r.code != 0);
  CHECK(contains(r.err, bad + ": metadata: pool 'max' is not avg or concat"));
  CHECK(lines_of(r.err).size() == 1);
}

TEST_CASE("predict: --rgb-mean/--rgb-std override the checkpoint; without names the name is null") {
  ImageCase c;
  const std::vector<double> mean{90, 100, 95}, std{40, 45, 50};
  make_image_case(c, mean, std, {{"input_mean", "1,2,3"}, {"input_std", "4,5,6"}});
  const RunResult r = run_predict(
      with_images({"--model", c.model_path, "--json", "--rgb-mean", "90,100,95", "--rgb-std", "40,45,50"}, c.paths),
      c.dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 5);
  for (size_t i = 0; i < 5; ++i) check_json_line(lines[i], c.paths[i], c.expected[i], 5, {});
}

TEST_CASE("predict: ImageNet's statistics without metadata or flags; --image-size and --resize") {
  ImageCase c;
  make_image_case(c, {123.675, 116.28, 103.53}, {58.395, 57.12, 57.375}, {}, 96);  // resize 110 (96 * 8/7)
  RunResult r = run_predict(with_images({"--model", c.model_path, "--json", "1", "--image-size", "96"}, c.paths), c.dir);
  INFO("stderr: ", r.err);
  REQUIRE(r.code == 0);
  std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 5);
  for (size_t i = 0; i < 5; ++i) check_json_line(lines[i], c.paths[i], c.expected[i], 5, {});
  // --resize 110 is the same as the default here; another resize gives other probabilities.
  r = run_predict(with_images({"--model", c.model_path, "--json", "1", "--image-size", "96", "--resize", "110"}, c.paths),
                  c.dir);
  REQUIRE(r.code == 0);
  CHECK(lines_of(r.out) == lines);
  r = run_predict(with_images({"--model", c.model_path, "--json", "1", "--image-size", "96", "--resize", "200"}, c.paths),
                  c.dir);
  REQUIRE(r.code == 0);
  CHECK(lines_of(r.out) != lines);
}

TEST_CASE("predict: text output with --labels names, --top-k larger than the classes") {
  ImageCase c;
  make_image_case(c, {100, 110, 120}, {50, 60, 70}, {{"input_mean", "100,110,120"}, {"input_std", "50,60,70"},
                                                     {"class_names", json_names(kNames)}});
  // CRLF, an empty name inside (class 2), blank lines at the end (ignored).
  const std::string labels = c.dir.file("classes.txt");
  const std::string text = "zero\r\none one\r\n\r\nthree\r\nfour\r\nfive\r\n\r\n\n";
  write_bytes(labels, std::vector<uint8_t>(text.begin(), text.end()));
  const std::vector<std::string> names{"zero", "one one", "", "three", "four", "five"};
  const RunResult r =
      run_predict(with_images({"--model", c.model_path, "--labels", labels, "--top-k", "10"}, {c.paths[0], c.paths[1]}),
                  c.dir);
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 2 * 7 + 1);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(lines[i * 7] == c.paths[i]);
    const std::vector<int64_t> order = ranking(c.expected[i]);
    for (size_t k = 0; k < 6; ++k) {
      const int64_t index = order[k];
      const std::string name = names[size_t(index)].empty() ? "" : " " + names[size_t(index)];
      char want[200];
      std::snprintf(want, sizeof want, "  %zu. %lld%s  %.4f", k + 1, (long long)index, name.c_str(),
                    c.expected[i][size_t(index)]);
      CHECK(lines[i * 7 + 1 + k] == want);
    }
  }
  CHECK(std::regex_match(lines.back(), std::regex(R"(Predicted 2 images in [0-9.]+ s: [0-9.]+ img/s \(decode \+ forward\))")));
  CHECK(contains(r.err, "names: " + labels));
}

TEST_CASE("predict: --data-val accuracy equals an evaluation here; names from the record file") {
  // Grey Fashion-MNIST images: a 1-channel model with a 3x3 stem and the data set's statistics in the metadata.
  const data::ImageSet fm = data::load_fashion_mnist(data::kFashionMnistDir, false);
  TempDir dir;
  const std::vector<double> mean{73.0}, std{90.0};
  auto model = make_model(1, 10, 3, mean, std, 7);
  const std::string model_path = dir.file("fm.safetensors");
  // Class names in the metadata in another order than the records' (sorted, as a folder listing would give).
  std::vector<std::string> sorted_names(data::kFashionMnistClassNames.begin(), data::kFashionMnistClassNames.end());
  std::sort(sorted_names.begin(), sorted_names.end());
  net::save_model(model_path, *model,
                  {{"input_mean", "73.0"}, {"input_std", "90.0"}, {"class_names", json_names(sorted_names)}});
  // 45 PNG records (batches of 16, 16, 13).
  const int64_t n = 45;
  const std::string records = dir.file("val.erec");
  std::vector<uint8_t> pixels(size_t(n) * 28 * 28);
  std::vector<int64_t> labels;
  {
    data::RecordFileSettings settings;
    settings.num_classes = 10;
    settings.channels = 1;
    for (const char* name : data::kFashionMnistClassNames) settings.class_names.push_back(name);
    data::RecordWriter writer(records, settings);
    for (int64_t i = 0; i < n; ++i) {
      data::Image img;
      img.height = img.width = 28, img.channels = 1;
      img.pixels.assign(fm.pixels.begin() + i * 784, fm.pixels.begin() + (i + 1) * 784);
      const std::vector<uint8_t> png = encoded(img, false);
      data::RecordInput in;
      in.id = uint64_t(i);
      in.label = fm.labels[size_t(i)];
      in.height = in.width = 28, in.channels = 1;
      in.encoding = data::Encoding::png;
      in.payload = png.data();
      in.payload_length = png.size();
      writer.add(in);
      labels.push_back(in.label);
      preprocess_here(png, 1, 28, data::validation_resize(28, 0), pixels.data() + size_t(i) * 784);
      if (i < 2) write_bytes(dir.file("fm" + std::to_string(i) + ".png"), png);
    }
    writer.finish();
  }
  const std::vector<std::vector<double>> p = probabilities_here(*model, pixels, n, 1, 28);
  int64_t top1 = 0, top5 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<int64_t> order = ranking(p[size_t(i)]);
    top1 += order[0] == labels[size_t(i)];
    top5 += std::find(order.begin(), order.begin() + 5, labels[size_t(i)]) != order.begin() + 5;
  }
  // The model's predictions vary, so the accuracies say something.
  CHECK(top1 < top5);
  CHECK(top5 < n);

  const RunResult r = run_predict({"--model", model_path, "--data-val", records, "--image-size", "28", "--batch-size",
                                   "16", "--disp-batches", "2", "--json", "1", dir.file("fm0.png"), dir.file("fm1.png")},
                                  dir);
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  REQUIRE(r.code == 0);
  const std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 3);
  std::vector<std::string> names(data::kFashionMnistClassNames.begin(), data::kFashionMnistClassNames.end());
  for (size_t i = 0; i < 2; ++i) check_json_line(lines[i], dir.file("fm" + std::to_string(i) + ".png"), p[i], 5, names);
  const json::Value v = json::parse(lines[2]);
  CHECK(v.find("images")->as_int() == n);
  CHECK(v.find("top1")->as_number() == doctest::Approx(double(top1) / double(n)).epsilon(1e-12));
  CHECK(v.find("top5")->as_number() == doctest::Approx(double(top5) / double(n)).epsilon(1e-12));
  CHECK(contains(r.err, "Validation [32/45]"));  // a progress line every 2 batches
  CHECK(contains(r.err, "predict: warning: " + records + " names its classes otherwise than " + model_path +
                            " (class 0: \"T-shirt/top\" in the records, \"Ankle boot\" in the model)"));

  // The text line.
  const RunResult t = run_predict({"--model", model_path, "--data-val", records, "--image-size", "28"}, dir);
  REQUIRE(t.code == 0);
  char want[200];
  std::snprintf(want, sizeof want, "Validation: top-1 %.4f, top-5 %.4f over %lld images (", double(top1) / double(n),
                double(top5) / double(n), (long long)n);
  CHECK(contains(t.out, want));
}

TEST_CASE("predict: unreadable images are named with the reason, the others still classified") {
  ImageCase c;
  make_image_case(c, {100, 110, 120}, {50, 60, 70}, {{"input_mean", "100,110,120"}, {"input_std", "50,60,70"}});
  const std::string missing = c.dir.file("missing.jpg");
  const std::string corrupt = c.dir.file("corrupt.jpg");
  write_bytes(corrupt, {0xFF, 0xD8, 0xFF, 0xE0, 'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'});
  const std::vector<std::string> images{c.paths[0], missing, c.paths[1], corrupt, c.paths[2]};

  RunResult r = run_predict(with_images({"--model", c.model_path, "--json", "1", "--batch-size", "3"}, images), c.dir);
  INFO("stdout: ", r.out, "\nstderr: ", r.err);
  CHECK(r.code == 1);
  std::vector<std::string> lines = lines_of(r.out);
  REQUIRE(lines.size() == 5);
  check_json_line(lines[0], c.paths[0], c.expected[0], 5, {});
  check_json_line(lines[2], c.paths[1], c.expected[1], 5, {});
  check_json_line(lines[4], c.paths[2], c.expected[2], 5, {});
  const json::Value bad1 = json::parse(lines[1]), bad3 = json::parse(lines[3]);
  CHECK(bad1.find("path")->as_string() == missing);
  CHECK(contains(bad1.find("error")->as_string(), "No such file"));
  CHECK(bad3.find("path")->as_string() == corrupt);
  CHECK(contains(bad3.find("error")->as_string(), "not a decodable image"));
  CHECK(contains(r.err, "predict: error: " + missing + ": cannot open: No such file"));
  CHECK(contains(r.err, "predict: error: " + corrupt + ": not a decodable image"));
  CHECK(contains(r.err, "2 of 5 images could not be classified"));
  CHECK(contains(r.err, "Predicted 3 images"));

  // Text mode, --skip-bad 1: warnings, exit 0.
  r = run_predict(with_images({"--model", c.model_path, "--skip-bad", "1"}, images), c.dir);
  CHECK(r.code == 0);
  lines = lines_of(r.out);
  CHECK(std::count(lines.begin(), lines.end(), c.paths[1]) == 1);
  CHECK(std::count(lines.begin(), lines.end(), missing) == 0);
  CHECK(contains(r.err, "predict: warning: " + corrupt + ": not a decodable image"));
  CHECK(contains(lines.back(), "Predicted 3 images"));
}

TEST_CASE("predict: one-line errors for a wrong labels file, --num-layers, --rgb-mean, metadata and a photo as --model") {
  ImageCase c;
  make_image_case(c, {100, 110, 120}, {50, 60, 70}, {{"input_mean", "100,110,120"}, {"input_std", "50,60,70"}});
  const std::string labels = c.dir.file("five.txt");
  const std::string text = "a\nb\nc\nd\ne\n";
  write_bytes(labels, std::vector<uint8_t>(text.begin(), text.end()));
  auto fails_with = [&](const std::vector<std::string>& args, const std::string& part) {
    const RunResult r = run_predict(with_images(args, {c.paths[0]}), c.dir);
    INFO("args: ", args.back(), "\nstdout: ", r.out, "\nstderr: ", r.err);
    CHECK(r.code == 1);
    CHECK(contains(r.err, part));
    CHECK(lines_of(r.err).size() >= 1);
    CHECK(contains(lines_of(r.err).back(), "predict: error: "));
  };
  fails_with({"--model", c.model_path, "--labels", labels}, labels + ": 5 class names (one per line) for the model's 6 classes");
  fails_with({"--model", c.model_path, "--num-layers", "34"}, "--num-layers 34: " + c.model_path + " holds a resnet-18");
  fails_with({"--model", c.model_path, "--rgb-mean", "1,2"}, "--rgb-mean needs 3 values");
  fails_with({"--model", c.dir.file("absent.safetensors")}, "absent.safetensors");
  // A photo given as the model (img0.jpg is a JPEG).
  fails_with({"--model", c.paths[0]}, c.paths[0] + " is not a safetensors checkpoint (it looks like a JPEG image)");
  fails_with({"--model", c.model_path, "--labels", c.dir.file("absent.txt")}, "absent.txt: cannot open");
  // --num-layers that agrees is fine.
  CHECK(run_predict(with_images({"--model", c.model_path, "--num-layers", "18"}, {c.paths[0]}), c.dir).code == 0);

  // Metadata that does not fit the model.
  auto model = make_model(3, 6, 7, {1, 1, 1}, {1, 1, 1}, 3);
  const std::string bad_meta = c.dir.file("bad_meta.safetensors");
  net::save_model(bad_meta, *model, {{"input_mean", "73.0"}});
  fails_with({"--model", bad_meta}, bad_meta + ": metadata input_mean has 1 values, the model takes 3 channels");
  net::save_model(bad_meta, *model, {{"class_names", "[\"a\",\"b\"]"}});
  fails_with({"--model", bad_meta}, bad_meta + ": metadata class_names has 2 names for the model's 6 classes");
}
