// net/mxnet_resnet.cpp — the name maps of net/mxnet_resnet.h, both ways, and
// the check of a symbolic checkpoint's prefix-symbol.json.
#include "net/mxnet_resnet.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "engine/error.h"
#include "engine/file_io.h"
#include "net/json.h"
#include "net/mxnet_params.h"
#include "ops/ops.h"

namespace ember::net {
namespace {

// A non-negative decimal number filling all of s, else -1.
int parse_index(const std::string& s) {
  if (s.empty() || s.size() > 6) return -1;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v;
}

// MXNet's batch-norm parameter names against ember's (PyTorch's).
struct BnName {
  const char* mxnet_symbolic;
  const char* mxnet_gluon;
  const char* ember;
  bool auxiliary;  // a running statistic: "aux:" in a symbolic checkpoint
};
constexpr BnName kBnNames[] = {{"gamma", "gamma", "weight", false},
                               {"beta", "beta", "bias", false},
                               {"moving_mean", "running_mean", "running_mean", true},
                               {"moving_var", "running_var", "running_var", true}};

const BnName* bn_by_mxnet(const std::string& suffix, bool gluon) {
  for (const BnName& b : kBnNames)
    if (suffix == (gluon ? b.mxnet_gluon : b.mxnet_symbolic)) return &b;
  return nullptr;
}
const BnName* bn_by_ember(const std::string& suffix) {
  for (const BnName& b : kBnNames)
    if (suffix == b.ember) return &b;
  return nullptr;
}

// ---- symbolic (resnet.py) names ----

// "stage2_unit3_conv1_weight" (prefix already stripped) -> "layer2.2.conv1.weight"; "" when not a resnet.py name.
std::string symbolic_to_ember(const std::string& name) {
  // The layer, then its parameter: the last one or two '_'-separated words.
  for (const char* suffix : {"moving_mean", "moving_var", "gamma", "beta", "weight", "bias"}) {
    const std::string tail = std::string("_") + suffix;
    if (!name.ends_with(tail)) continue;
    const std::string layer = name.substr(0, name.size() - tail.size());
    const BnName* bn = bn_by_mxnet(suffix, false);
    const bool weight = std::string(suffix) == "weight", bias = std::string(suffix) == "bias";
    if (bn) {
      if (layer == "bn_data") return cat("input_bn.", bn->ember);
      if (layer == "bn0") return cat("bn1.", bn->ember);
      if (layer == "bn1") return cat("final_bn.", bn->ember);
    }
    if (layer == "conv0" && weight) return "conv1.weight";
    if ((layer == "fc1" || layer == "fc") && (weight || bias)) return cat("fc.", suffix);
    // stageS_unitU_part
    if (!layer.starts_with("stage")) return "";
    const size_t u = layer.find("_unit");
    if (u == std::string::npos) return "";
    const size_t part_at = layer.find('_', u + 1);
    if (part_at == std::string::npos) return "";
    const int stage = parse_index(layer.substr(5, u - 5));
    const int unit = parse_index(layer.substr(u + 5, part_at - u - 5));
    const std::string part = layer.substr(part_at + 1);
    if (stage < 1 || unit < 1) return "";
    const std::string block = cat("layer", stage, ".", unit - 1, ".");
    if (bn && (part == "bn1" || part == "bn2" || part == "bn3")) return block + part + "." + bn->ember;
    if (weight && (part == "conv1" || part == "conv2" || part == "conv3")) return block + part + ".weight";
    if (weight && part == "sc") return block + "shortcut.weight";
    return "";
  }
  return "";
}

// An ember tensor name taken apart: "layer2.2.conv1.weight" is module
// "layer2.2.conv1", param "weight", stage 2, block 2, part "conv1"; names
// outside the stages have stage 0.
struct EmberName {
  std::string module, param, part;
  int stage = 0, block = -1;
};

std::optional<EmberName> split_ember_name(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return std::nullopt;
  EmberName n{name.substr(0, dot), name.substr(dot + 1), "", 0, -1};
  if (!n.module.starts_with("layer")) return n;
  const size_t d1 = n.module.find('.');
  const size_t d2 = d1 == std::string::npos ? std::string::npos : n.module.find('.', d1 + 1);
  if (d2 == std::string::npos) return std::nullopt;
  n.stage = parse_index(n.module.substr(5, d1 - 5));
  n.block = parse_index(n.module.substr(d1 + 1, d2 - d1 - 1));
  n.part = n.module.substr(d2 + 1);
  if (n.stage < 1 || n.block < 0) return std::nullopt;
  return n;
}

// "layer2.2.conv1.weight" -> "arg:stage2_unit3_conv1_weight"; "" when ember's name has no resnet.py counterpart.
std::string ember_to_symbolic(const std::string& name) {
  const std::optional<EmberName> n = split_ember_name(name);
  if (!n) return "";
  const std::string &module = n->module, &param = n->param, &part = n->part;
  const BnName* bn = bn_by_ember(param);
  const auto bn_name = [&](const std::string& layer) {
    return cat(bn->auxiliary ? "aux:" : "arg:", layer, "_", bn->mxnet_symbolic);
  };
  if (n->stage == 0) {
    if (module == "input_bn" && bn) return bn_name("bn_data");
    if (module == "bn1" && bn) return bn_name("bn0");
    if (module == "final_bn" && bn) return bn_name("bn1");
    if (module == "conv1" && param == "weight") return "arg:conv0_weight";
    if (module == "fc" && (param == "weight" || param == "bias")) return "arg:fc1_" + param;
    return "";
  }
  const std::string unit = cat("stage", n->stage, "_unit", n->block + 1, "_");
  if (bn && (part == "bn1" || part == "bn2" || part == "bn3")) return bn_name(unit + part);
  if (param == "weight" && (part == "conv1" || part == "conv2" || part == "conv3"))
    return cat("arg:", unit, part, "_weight");
  if (param == "weight" && part == "shortcut") return cat("arg:", unit, "sc_weight");
  return "";
}

// ---- Gluon (model_zoo resnet*_v1, save_parameters) names ----

// The body indices of a v1 block: conv, bn, relu, conv, bn[, relu, conv, bn].
constexpr const char* kGluonBody[] = {"conv1", "bn1", nullptr, "conv2", "bn2", nullptr, "conv3", "bn3"};
constexpr int kGluonFirstStage = 4;  // features: 0 conv, 1 bn, 2 relu, 3 max-pool, 4..7 the stages

// The ember name of a conv ("conv*", "downsample.0") or batch norm parameter, or "".
std::string gluon_param(const std::string& module, bool is_bn, const std::string& param) {
  if (is_bn) {
    const BnName* bn = bn_by_mxnet(param, true);
    return bn ? module + "." + bn->ember : "";
  }
  return param == "weight" || param == "bias" ? module + "." + param : "";
}

std::string gluon_to_ember(const std::string& name) {
  if (name == "output.weight" || name == "output.bias") return "fc." + name.substr(7);
  if (!name.starts_with("features.")) return "";
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t dot = name.find('.', at);
    parts.push_back(name.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  const int k = parse_index(parts[1]);
  if (parts.size() == 3 && k == 0) return gluon_param("conv1", false, parts[2]);
  if (parts.size() == 3 && k == 1) return gluon_param("bn1", true, parts[2]);
  if (parts.size() != 6 || k < kGluonFirstStage || k >= kGluonFirstStage + 4) return "";
  const int block = parse_index(parts[2]), index = parse_index(parts[4]);
  if (block < 0 || index < 0) return "";
  const std::string prefix = cat("layer", k - kGluonFirstStage + 1, ".", block, ".");
  if (parts[3] == "body" && index < 8 && kGluonBody[index]) {
    const std::string m = kGluonBody[index];
    return gluon_param(prefix + m, m[0] == 'b', parts[5]);
  }
  if (parts[3] == "downsample" && index < 2) return gluon_param(prefix + "downsample." + parts[4], index == 1, parts[5]);
  return "";
}

std::string ember_to_gluon(const std::string& name) {
  const std::optional<EmberName> n = split_ember_name(name);
  if (!n) return "";
  const std::string &module = n->module, &param = n->param, &part = n->part;
  const BnName* bn = bn_by_ember(param);
  const auto bn_or_conv = [&](const std::string& gluon_module, bool is_bn) -> std::string {
    if (is_bn) return bn ? gluon_module + "." + bn->mxnet_gluon : "";
    return param == "weight" || param == "bias" ? gluon_module + "." + param : "";
  };
  if (n->stage == 0) {
    if (module == "fc") return param == "weight" || param == "bias" ? "output." + param : "";
    if (module == "conv1") return bn_or_conv("features.0", false);
    if (module == "bn1") return bn_or_conv("features.1", true);
    return "";
  }
  if (n->stage > 4) return "";
  const std::string prefix = cat("features.", kGluonFirstStage + n->stage - 1, ".", n->block, ".");
  for (int i = 0; i < 8; ++i)
    if (kGluonBody[i] && part == kGluonBody[i]) return bn_or_conv(cat(prefix, "body.", i), part[0] == 'b');
  if (part == "downsample.0") return bn_or_conv(prefix + "downsample.0", false);
  if (part == "downsample.1") return bn_or_conv(prefix + "downsample.1", true);
  return "";
}

// A few names for an error message: "a, b, c and 12 more".
std::string some_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 4; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 4) s += cat(" and ", names.size() - 4, " more");
  return s;
}

// The operators of resnet.py's graph (and of fine-tune.py's new head).
bool known_symbol_op(const std::string& op) {
  static const std::set<std::string> ops = {"null",     "_copy",          "identity",   "Cast",     "BatchNorm",
                                            "Activation", "relu",         "Convolution", "Pooling", "elemwise_add",
                                            "_Plus",    "_plus",          "broadcast_add", "Flatten", "flatten",
                                            "FullyConnected", "SoftmaxOutput", "softmax", "SoftmaxActivation"};
  return ops.count(op) > 0;
}

// An MXNet symbol file's JSON; a parse error names the file.
json::Value read_symbol(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  try {
    return json::parse(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  } catch (const Error& e) {
    fail(cat(path, ": ", e.what()));
  }
}

// The symbol's variables must be the file's parameters (plus the data and
// label inputs), and its operators ones ember's pre-activation ResNet has.
void check_symbol(const std::string& symbol_path, const std::set<std::string>& params) {
  const json::Value root = read_symbol(symbol_path);
  const json::Value* nodes = root.find("nodes");
  EMBER_CHECK(nodes && nodes->is_array(), symbol_path, ": no \"nodes\" array (not an MXNet symbol file)");
  std::set<std::string> variables;
  for (const json::Value& n : nodes->as_array()) {
    const json::Value* op = n.find("op");
    const json::Value* name = n.find("name");
    EMBER_CHECK(op && op->is_string() && name && name->is_string(), symbol_path, ": a node without op and name");
    EMBER_CHECK(known_symbol_op(op->as_string()), symbol_path, ": operator ", op->as_string(), " (node ",
                name->as_string(), ") is not part of MXNet's pre-activation ResNet (resnet.py)");
    if (op->as_string() == "null" && name->as_string() != "data" && !name->as_string().ends_with("_label"))
      variables.insert(name->as_string());
  }
  std::vector<std::string> missing, extra;
  for (const std::string& v : variables)
    if (!params.count(v)) missing.push_back(v);
  for (const std::string& p : params)
    if (!variables.count(p)) extra.push_back(p);
  EMBER_CHECK(missing.empty() && extra.empty(), symbol_path, ": the symbol and the parameter file differ: ",
              missing.size(), " variables without parameters (", some_names(missing), "), ", extra.size(),
              " parameters the symbol does not use (", some_names(extra), ")");
}

Tensor to_tensor(const MxnetArray& a) { return Tensor::from_data(a.values.data(), Shape(a.shape)); }

}  // namespace

std::string mxnet_symbol_path(const std::string& params_path) {
  // prefix-EEEE.params
  const std::string tail = ".params";
  if (!params_path.ends_with(tail) || params_path.size() < tail.size() + 5) return "";
  const std::string stem = params_path.substr(0, params_path.size() - tail.size());
  const std::string epoch = stem.substr(stem.size() - 5);
  if (epoch[0] != '-' || parse_index(epoch.substr(1)) < 0) return "";
  return stem.substr(0, stem.size() - 5) + "-symbol.json";
}

SafetensorsFile read_mxnet_resnet(const std::string& path) {
  const std::vector<MxnetArray> arrays = read_mxnet_params(path);
  EMBER_CHECK(!arrays.empty() && !arrays.front().name.empty(), path,
              ": an MXNet parameter file without names (a plain list): nothing says which parameter is which");
  bool gluon = false, symbolic = false;
  for (const MxnetArray& a : arrays) {
    gluon |= a.name.starts_with("features.") || a.name.starts_with("output.");
    symbolic |= a.name.starts_with("arg:") || a.name.starts_with("aux:");
  }
  EMBER_CHECK(!(gluon && symbolic), path, ": mixes Gluon names (features.*) and symbolic ones (arg:/aux:)");
  // Neither: resnet.py names saved without the arg:/aux: prefixes (mx.nd.save of a dict), or not a ResNet at all.
  const bool exported = arrays.front().name.starts_with("resnetv1");
  EMBER_CHECK(!exported, path, ": ", arrays.front().name,
              " is a name of a Gluon network's export(): load the file its save_parameters() writes");
  SafetensorsFile out;
  std::vector<std::string> unknown;
  std::set<std::string> plain_names;
  for (const MxnetArray& a : arrays) {
    std::string name = a.name;
    if (name.starts_with("arg:") || name.starts_with("aux:")) name = name.substr(4);
    plain_names.insert(name);
    const std::string ember_name = gluon ? gluon_to_ember(name) : symbolic_to_ember(name);
    if (ember_name.empty()) {
      unknown.push_back(a.name);
      continue;
    }
    Tensor t = to_tensor(a);
    if (ember_name == "input_bn.weight") t = Tensor::full(t.shape(), 1.0);  // fix_gamma=True: MXNet uses 1
    out.tensors.emplace_back(ember_name, std::move(t));
  }
  EMBER_CHECK(unknown.empty(), path, ": ", unknown.size(), " parameter", unknown.size() == 1 ? " is" : "s are",
              " not in MXNet's ", gluon ? "Gluon resnet*_v1 (features.*, output.*)" : "resnet.py ResNet", ": ",
              some_names(unknown));
  if (gluon) {
    // A thumbnail net (3x3 stem without batch norm) would put its stages at features.1.
    EMBER_CHECK(out.find("bn1.weight"), path,
                ": no features.1 batch norm: a thumbnail Gluon ResNet (3x3 stem, no batch norm), which ember does "
                "not build");
  } else {
    const std::string symbol = mxnet_symbol_path(path);
    if (!symbol.empty()) {
      std::error_code ec;
      EMBER_CHECK(std::filesystem::exists(symbol, ec), path, ": its symbol ", symbol,
                  " is missing (MXNet's fine-tune.py loads both; copy it beside the .params)");
      check_symbol(symbol, plain_names);
    }
  }
  out.metadata["network"] = "resnet";
  out.metadata["variant"] = resnet_variant_name(gluon ? ResNetVariant::gluon_v1 : ResNetVariant::mxnet_preact);
  out.metadata["mxnet_kind"] = gluon ? "gluon" : "symbolic";
  // The recipes' input statistics (0-255 units): Gluon's model zoo ImageNet's mean/std; train_imagenet.py's
  // ImageRecordIter mean subtraction (std 1) for symbolic nets, raw pixels for a one-channel one (train_mnist).
  const Tensor* stem = out.find("conv1.weight");
  const bool grey = stem && stem->ndim() == 4 && stem->shape()[1] == 1;
  if (gluon) {
    out.metadata["input_mean"] = grey ? "127.5" : "123.675,116.28,103.53";
    out.metadata["input_std"] = grey ? "63.75" : "58.395,57.12,57.375";
  } else {
    out.metadata["input_mean"] = grey ? "0" : "123.68,116.779,103.939";
    out.metadata["input_std"] = grey ? "1" : "1,1,1";
  }
  return out;
}

SafetensorsFile load_model_file(const std::string& path) {
  return is_mxnet_params_file(path) ? read_mxnet_resnet(path) : load_safetensors(path);
}

namespace {

// The template symbol with its one FullyConnected node's num_hidden set to
// `classes`; *head gets that node's name.
std::string retarget_symbol(const std::string& template_path, int64_t classes, std::string* head) {
  json::Value root = read_symbol(template_path);
  json::Value* fc = nullptr;
  int found = 0;
  if (root.is_object())
    for (auto& [key, value] : root.as_object())
      if (key == "nodes" && value.is_array())
        for (json::Value& n : value.as_array())
          if (const json::Value* op = n.find("op"); op && op->is_string() && op->as_string() == "FullyConnected")
            fc = &n, ++found;
  EMBER_CHECK(found == 1, template_path, ": ", found, " FullyConnected nodes (a resnet.py symbol has one, the head)");
  const json::Value* name = fc->find("name");
  EMBER_CHECK(name && name->is_string(), template_path, ": the FullyConnected node has no name");
  *head = name->as_string();
  bool set = false;
  for (auto& [key, value] : fc->as_object())
    if ((key == "attrs" || key == "attr" || key == "param") && value.is_object())
      for (auto& [k, v] : value.as_object())
        if (k == "num_hidden") v = json::Value(std::to_string(classes)), set = true;
  EMBER_CHECK(set, template_path, ": the FullyConnected node ", *head, " has no num_hidden attribute");
  return json::write(root);
}

}  // namespace

MxnetExport write_mxnet_resnet(const SafetensorsFile& checkpoint, const std::string& source,
                               const std::string& params_path, const std::string& symbol_template) {
  const auto v = checkpoint.metadata.find("variant");
  const ResNetVariant variant =
      v == checkpoint.metadata.end() ? ResNetVariant::torchvision : parse_resnet_variant(v->second, source);
  EMBER_CHECK(variant != ResNetVariant::torchvision, source,
              ": a torchvision ResNet (stride on the 3x3, no variant in the metadata) has no MXNet counterpart; "
              "only gluon-v1 and mxnet-preact models are written as MXNet parameters");
  const bool gluon = variant == ResNetVariant::gluon_v1;
  MxnetExport result;
  result.kind = gluon ? MxnetKind::gluon : MxnetKind::symbolic;
  std::string symbol_text, head = "fc1";
  const std::string symbol_path = mxnet_symbol_path(params_path);
  if (!gluon && !symbol_template.empty() && !symbol_path.empty()) {
    const Tensor* fc = checkpoint.find("fc.weight");
    EMBER_CHECK(fc && fc->ndim() == 2, source, ": no fc.weight");
    symbol_text = retarget_symbol(symbol_template, fc->shape()[0], &head);
  }
  std::vector<MxnetArray> arrays;
  std::vector<std::string> unknown;
  for (const auto& [name, t] : checkpoint.tensors) {
    if (name.ends_with(".num_batches_tracked")) continue;  // MXNet keeps no such counter
    MxnetArray a;
    a.name = gluon ? ember_to_gluon(name) : ember_to_symbolic(name);
    if (a.name.empty()) {
      unknown.push_back(name);
      continue;
    }
    if (!gluon && name.starts_with("fc.")) a.name = cat("arg:", head, "_", name.substr(3));
    const Tensor f = t.dtype() == DType::f32 ? t : ops::cast(t, DType::f32);
    for (int64_t d = 0; d < f.ndim(); ++d) a.shape.push_back(f.shape()[d]);
    a.values.assign(f.data<float>(), f.data<float>() + f.numel());
    arrays.push_back(std::move(a));
  }
  EMBER_CHECK(unknown.empty(), source, ": ", unknown.size(), " tensor", unknown.size() == 1 ? " has" : "s have",
              " no place in MXNet's ", resnet_variant_name(variant), " ResNet: ", some_names(unknown));
  write_mxnet_params(params_path, arrays);
  if (!symbol_text.empty()) {
    write_file_atomic(symbol_path, symbol_text.data(), symbol_text.size());
    result.symbol_path = symbol_path;
  }
  return result;
}

}  // namespace ember::net
