// tests/net/test_mxnet_params.cpp — MXNet's .params format (net/mxnet_params.h)
// and the name maps of its ResNets (net/mxnet_resnet.h), without MXNet:
// files built byte by byte here, every dtype and both array formats, every
// way a file can be cut or lie, and ember models of each MXNet variant
// written as MXNet files and read back. (tests/net/test_mxnet_models.cpp
// checks the same against MXNet 1.9.1 itself.)
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/file_io.h"
#include "engine/half.h"
#include "net/checkpoint.h"
#include "net/mxnet_params.h"
#include "net/mxnet_resnet.h"
#include "net/pretrained.h"
#include "net/resnet.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using namespace ember::net;

namespace {

// A little-endian byte builder for hand-made files.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof v);
    std::memcpy(b.data() + at, &v, sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    put(uint64_t(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

// One array in format V2 (or V3) with dtype flag `dtype` and raw element bytes.
void put_array(Bytes& f, const std::vector<int64_t>& shape, int32_t dtype, const std::vector<uint8_t>& data,
               uint32_t magic = 0xF993fac9) {
  f.put(magic).put(int32_t(0)).put(int32_t(shape.size()));
  for (int64_t d : shape) f.put(d);
  f.put(int32_t(1)).put(int32_t(0)).put(dtype);
  f.b.insert(f.b.end(), data.begin(), data.end());
}

template <typename T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::string read_text_file(const std::string& path) {
  const std::vector<uint8_t> b = read_file(path);
  return std::string(b.begin(), b.end());
}

std::vector<MxnetArray> parse(const Bytes& f) { return parse_mxnet_params(f.b.data(), f.b.size(), "m.params"); }

std::string parse_error(const Bytes& f) {
  try {
    parse(f);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A valid two-array file: f32 [2, 3] "arg:w" and f16 [2] "aux:m".
Bytes two_arrays() {
  Bytes f;
  f.put(uint64_t(0x112)).put(uint64_t(0)).put(uint64_t(2));
  put_array(f, {2, 3}, 0, raw(std::vector<float>{1, 2, 3, 4, 5, -6.5f}));
  put_array(f, {2}, 2, raw(std::vector<uint16_t>{float_to_half(0.5f), float_to_half(-2.0f)}));
  f.put(uint64_t(2)).str("arg:w").str("aux:m");
  return f;
}

}  // namespace

TEST_CASE("mxnet params: every floating dtype, both array formats, names or none") {
  Bytes f;
  f.put(uint64_t(0x112)).put(uint64_t(0)).put(uint64_t(4));
  put_array(f, {3}, 0, raw(std::vector<float>{1.5f, -2, 3}));
  put_array(f, {1, 2}, 1, raw(std::vector<double>{0.25, -8}));
  put_array(f, {2}, 12, raw(std::vector<uint16_t>{0x3f80, 0xc040}));  // bf16 1, -3
  put_array(f, {}, 0, raw(std::vector<float>{7}), 0xF993faca);       // V3: ndim 0 is a scalar
  put_array(f, {0, 3}, 0, {});                                         // no elements
  f.put(uint64_t(5)).str("a").str("b").str("c").str("d").str("e");
  std::memcpy(f.b.data() + 16, "\x05", 1);                           // the array count
  const auto arrays = parse(f);
  REQUIRE(arrays.size() == 5);
  CHECK(arrays[4].shape == std::vector<int64_t>{0, 3});
  CHECK(arrays[4].values.empty());
  CHECK(arrays[0].name == "a");
  CHECK(arrays[0].values == std::vector<float>{1.5f, -2, 3});
  CHECK(arrays[1].shape == std::vector<int64_t>{1, 2});
  CHECK(arrays[1].values == std::vector<float>{0.25f, -8});
  CHECK(arrays[1].stored_dtype == "float64");
  CHECK(arrays[2].values == std::vector<float>{1, -3});
  CHECK(arrays[2].stored_dtype == "bfloat16");
  CHECK(arrays[3].shape.empty());
  CHECK(arrays[3].values == std::vector<float>{7});

  const auto two = parse(two_arrays());
  CHECK(two[1].values == std::vector<float>{0.5f, -2});
  CHECK(two[1].stored_dtype == "float16");

  // A plain list (mx.nd.save of a list): no names.
  Bytes plain;
  plain.put(uint64_t(0x112)).put(uint64_t(0)).put(uint64_t(1));
  put_array(plain, {1}, 0, raw(std::vector<float>{4}));
  plain.put(uint64_t(0));
  CHECK(parse(plain).at(0).name.empty());
}

TEST_CASE("mxnet params: what ember writes reads back bit for bit, through a file") {
  std::vector<MxnetArray> arrays(2);
  arrays[0].name = "arg:conv0_weight";
  arrays[0].shape = {2, 1, 1, 2};
  arrays[0].values = {1.f, -0.f, 3e-38f, 1e30f};
  arrays[1].name = "aux:bn0_moving_var";
  arrays[1].shape = {3};
  arrays[1].values = {0.5f, 1, 2};
  const ember::testing::TempDir dir;
  const std::string path = dir.file("x-0003.params");
  write_mxnet_params(path, arrays);
  CHECK(is_mxnet_params_file(path));
  const auto back = read_mxnet_params(path);
  REQUIRE(back.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(back[i].name == arrays[i].name);
    CHECK(back[i].shape == arrays[i].shape);
    CHECK(std::memcmp(back[i].values.data(), arrays[i].values.data(), arrays[i].values.size() * 4) == 0);
  }
  // Names must be unique, values must fill the shape.
  arrays[1].name = arrays[0].name;
  CHECK_THROWS_WITH(write_mxnet_params(path, arrays), doctest::Contains("is empty or repeated"));
  arrays[1].name = "b";
  arrays[1].values.pop_back();
  CHECK_THROWS_WITH(write_mxnet_params(path, arrays), doctest::Contains("has 2 values for its shape"));
  CHECK(read_mxnet_params(path).size() == 2);  // the failed writes left the file alone
}

TEST_CASE("mxnet params: a cut or lying file is one error line naming the file") {
  const Bytes good = two_arrays();
  REQUIRE(parse(good).size() == 2);
  // Every shorter prefix fails cleanly.
  for (size_t n = 0; n < good.b.size(); ++n) {
    Bytes cut;
    cut.b.assign(good.b.begin(), good.b.begin() + long(n));
    const std::string e = parse_error(cut);
    CAPTURE(n);
    CHECK(e.rfind("m.params: ", 0) == 0);
    CHECK(e.find('\n') == std::string::npos);
  }
  const auto with = [&](size_t at, auto value) {
    Bytes f = good;
    std::memcpy(f.b.data() + at, &value, sizeof value);
    return parse_error(f);
  };
  CHECK(with(0, uint64_t(0x113)).find("not an MXNet parameter file") != std::string::npos);
  CHECK(with(16, uint64_t(1) << 40).find("claims") != std::string::npos);         // array count
  CHECK(with(24, uint32_t(0xF993fac8)).find("array magic") != std::string::npos);  // pre-1.0 format
  CHECK(with(28, int32_t(1)).find("sparse") != std::string::npos);                 // storage type
  CHECK(with(32, int32_t(33)).find("ndim 33") != std::string::npos);
  CHECK(with(36, int64_t(-2)).find("dimension 0 is -2") != std::string::npos);
  CHECK(with(36, int64_t(1) << 30).find("bytes are left") != std::string::npos);
  CHECK(with(60, int32_t(4)).find("int32 is not a floating-point") != std::string::npos);  // dtype
  CHECK(with(60, int32_t(99)).find("unknown dtype flag 99") != std::string::npos);
  Bytes extra = good;
  extra.b.push_back(0);
  CHECK(parse_error(extra).find("1 bytes after the last name") != std::string::npos);
  Bytes twice = good;
  const size_t last = twice.b.size() - 5;  // "aux:m" -> "arg:w"
  std::memcpy(twice.b.data() + last, "arg:w", 5);
  CHECK(parse_error(twice).find("appears twice") != std::string::npos);
}

namespace {

// An ember model of `variant`, saved as a checkpoint with random values in
// every tensor (so that a swapped name shows).
SafetensorsFile random_checkpoint(ResNetVariant variant, int depth, int64_t width, int64_t image_size) {
  ResNetConfig cfg;
  cfg.num_layers = depth;
  cfg.width = width;
  cfg.num_classes = 5;
  cfg.in_channels = 3;
  cfg.image_size = image_size;
  cfg.variant = variant;
  Generator gen(3);
  ResNet model(cfg, gen);
  SafetensorsFile f;
  float x = 0.25f;
  for (auto& [name, t] : model.state()) {
    Tensor v = t->clone();
    if (v.dtype() == DType::f32)
      for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = (x = x * 1.37f + 0.11f, x -= float(int(x)));
    f.tensors.emplace_back(name, v);
  }
  f.metadata["variant"] = resnet_variant_name(variant);
  return f;
}

}  // namespace

TEST_CASE("mxnet resnet: ember models of both MXNet variants written as MXNet files and read back") {
  const ember::testing::TempDir dir;
  struct Case {
    ResNetVariant variant;
    int depth;
    int64_t width, image_size;
    std::vector<std::string> mxnet_names;  // some names the MXNet file must hold
  };
  const std::vector<Case> cases = {
      {ResNetVariant::mxnet_preact, 18, 4, 64, {"aux:bn_data_moving_var", "arg:conv0_weight", "arg:bn0_gamma",
                                                 "arg:stage1_unit1_sc_weight", "arg:stage4_unit2_conv2_weight",
                                                 "aux:stage3_unit1_bn2_moving_mean", "arg:bn1_beta", "arg:fc1_bias"}},
      {ResNetVariant::mxnet_preact, 50, 2, 64, {"arg:stage2_unit4_bn3_gamma", "arg:stage4_unit1_sc_weight"}},
      {ResNetVariant::mxnet_preact, 20, 4, 28, {"arg:conv0_weight", "arg:stage3_unit3_conv2_weight", "arg:bn1_gamma"}},
      {ResNetVariant::gluon_v1, 18, 4, 64, {"features.0.weight", "features.1.running_var", "features.5.0.downsample.0.weight",
                                            "features.7.1.body.4.gamma", "output.weight"}},
      {ResNetVariant::gluon_v1, 50, 2, 64, {"features.4.0.body.0.bias", "features.4.2.body.7.running_mean",
                                            "features.6.5.body.6.weight"}},
  };
  for (const Case& c : cases) {
    CAPTURE(resnet_variant_name(c.variant));
    CAPTURE(c.depth);
    const SafetensorsFile ckpt = random_checkpoint(c.variant, c.depth, c.width, c.image_size);
    const std::string path = dir.file("model.params");  // no -EEEE: no symbol file is looked for
    const MxnetExport e = write_mxnet_resnet(ckpt, "ckpt", path);
    CHECK((e.kind == MxnetKind::gluon) == (c.variant == ResNetVariant::gluon_v1));
    CHECK(e.symbol_path.empty());
    std::map<std::string, size_t> mx;
    for (const MxnetArray& a : read_mxnet_params(path)) mx[a.name] = a.values.size();
    for (const std::string& n : c.mxnet_names) CHECK_MESSAGE(mx.count(n), n << " missing");
    for (const auto& [n, size] : mx) CHECK_MESSAGE(n.find("num_batches") == std::string::npos, n);

    const SafetensorsFile back = read_mxnet_resnet(path);
    CHECK(back.metadata.at("variant") == resnet_variant_name(c.variant));
    size_t compared = 0;
    for (const auto& [name, t] : ckpt.tensors) {
      CAPTURE(name);
      if (name.find("num_batches_tracked") != std::string::npos) {
        CHECK(back.find(name) == nullptr);
        continue;
      }
      const Tensor* b = back.find(name);
      REQUIRE(b);
      REQUIRE(b->shape() == t.shape());
      const bool fixed_gamma = name == "input_bn.weight";
      for (int64_t i = 0; i < t.numel(); ++i)
        REQUIRE(b->data<float>()[i] == (fixed_gamma ? 1.0f : t.data<float>()[i]));
      ++compared;
    }
    CHECK(back.tensors.size() == compared);
    // What the file says is the structure it came from.
    const InferredResNet r = infer_resnet_config(back, path);
    CHECK(r.num_layers == c.depth);
    CHECK(r.width == c.width);
    CHECK(r.variant == c.variant);
    CHECK(r.num_classes == 5);
  }
}

TEST_CASE("mxnet resnet: files that are not MXNet's ResNets, and symbols that do not fit, are refused by name") {
  const ember::testing::TempDir dir;
  const auto error_of = [](const std::string& path) {
    try {
      read_mxnet_resnet(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::vector<MxnetArray> arrays(1);
  arrays[0].shape = {1};
  arrays[0].values = {1};
  arrays[0].name = "arg:stage1_unit1_conv9_weight";
  write_mxnet_params(dir.file("a.params"), arrays);
  CHECK(error_of(dir.file("a.params")).find("not in MXNet's resnet.py ResNet: arg:stage1_unit1_conv9_weight") !=
        std::string::npos);
  arrays[0].name = "features.9.0.body.0.weight";
  write_mxnet_params(dir.file("g.params"), arrays);
  CHECK(error_of(dir.file("g.params")).find("Gluon resnet*_v1") != std::string::npos);
  arrays[0].name = "resnetv10_conv0_weight";
  write_mxnet_params(dir.file("e.params"), arrays);
  CHECK(error_of(dir.file("e.params")).find("save_parameters") != std::string::npos);

  // A symbolic checkpoint: prefix-EEEE.params needs prefix-symbol.json, whose variables are the parameters.
  const SafetensorsFile ckpt = random_checkpoint(ResNetVariant::mxnet_preact, 20, 2, 28);
  const std::string params = dir.file("net-0007.params");
  CHECK(mxnet_symbol_path(params) == dir.file("net-symbol.json"));
  CHECK(mxnet_symbol_path(dir.file("net.params")).empty());
  write_mxnet_resnet(ckpt, "ckpt", params);
  CHECK(error_of(params).find("net-symbol.json is missing") != std::string::npos);
  std::string nodes = R"({"op":"null","name":"data","inputs":[]},{"op":"null","name":"softmax_label","inputs":[]})";
  for (const MxnetArray& a : read_mxnet_params(params))
    nodes += R"(,{"op":"null","name":")" + a.name.substr(4) + R"(","inputs":[]})";
  const auto write_symbol = [&](const std::string& extra) {
    std::ofstream(dir.file("net-symbol.json")) << R"({"nodes":[)" << nodes << extra << R"(],"heads":[[0,0,0]]})";
  };
  write_symbol(R"(,{"op":"Convolution","name":"c","inputs":[[0,0,0]]})");
  CHECK(error_of(params).empty());
  CHECK(load_model_file(params).metadata.at("variant") == "mxnet-preact");
  write_symbol(R"(,{"op":"Dropout","name":"drop0","inputs":[[0,0,0]]})");
  CHECK(error_of(params).find("operator Dropout (node drop0) is not part of") != std::string::npos);
  write_symbol(R"(,{"op":"null","name":"stage9_unit1_conv1_weight","inputs":[]})");
  CHECK(error_of(params).find("1 variables without parameters (stage9_unit1_conv1_weight)") != std::string::npos);

  // Written back with the symbol of the checkpoint it was fine-tuned from (here one whose head fine-tune.py
  // renamed fc): the symbol is retargeted to 5 classes and the head keeps the template's name.
  std::string fc_nodes = nodes;
  for (const char* p : {"weight", "bias"})
    fc_nodes.replace(fc_nodes.find(std::string("fc1_") + p), 4 + std::strlen(p), std::string("fc_") + p);
  std::ofstream(dir.file("template-symbol.json"))
      << R"({"nodes":[)" << fc_nodes
      << R"(,{"op":"FullyConnected","name":"fc","attrs":{"num_hidden":"1000"},"inputs":[[0,0,0]]}],"heads":[[0,0,0]],)"
      << R"("attrs":{"mxnet_version":["int",10901]}})";
  const MxnetExport e =
      write_mxnet_resnet(ckpt, "ckpt", dir.file("tuned-0003.params"), dir.file("template-symbol.json"));
  CHECK(e.symbol_path == dir.file("tuned-symbol.json"));
  const std::string symbol = read_text_file(e.symbol_path);
  CHECK(symbol.find(R"("name":"fc","attrs":{"num_hidden":"5"})") != std::string::npos);
  CHECK(symbol.find(R"("mxnet_version":["int",10901])") != std::string::npos);
  std::set<std::string> names;
  for (const MxnetArray& a : read_mxnet_params(dir.file("tuned-0003.params"))) names.insert(a.name);
  CHECK(names.count("arg:fc_weight"));
  CHECK(names.count("arg:fc_bias"));
  CHECK_FALSE(names.count("arg:fc1_weight"));
  CHECK(read_mxnet_resnet(dir.file("tuned-0003.params")).find("fc.weight"));  // the pair checks out

  // ember's own ResNets have no MXNet counterpart.
  const SafetensorsFile tv = random_checkpoint(ResNetVariant::torchvision, 18, 2, 64);
  CHECK_THROWS_WITH(write_mxnet_resnet(tv, "tv.safetensors", dir.file("tv.params")),
                    doctest::Contains("has no MXNet counterpart"));
}
