// net/pretrained.cpp — loading torchvision/timm/ember ResNet weights with one
// report of every mismatch, and reading a ResNet's structure from its names.
#include "net/pretrained.h"

#include <algorithm>
#include <array>
#include <map>
#include <set>

#include "ops/ops.h"

namespace ember::net {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "a, b, c and 4 more"
std::string some_of(const std::vector<std::string>& items, size_t shown = 4) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < shown; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > shown) s += cat(" and ", items.size() - shown, " more");
  return s;
}

}  // namespace

std::string PretrainedReport::describe() const {
  std::string s = cat("loaded ", loaded, " tensors");
  if (converted > 0) s += cat(" (", converted, " converted from ", converted_from, ")");
  if (stripped_module_prefix) s += ", \"module.\" prefix dropped";
  if (missing_batch_counters > 0) s += cat(", ", missing_batch_counters, " num_batches_tracked absent (set to 0)");
  if (!head_skipped.empty()) s += cat("; head not loaded: ", some_of(head_skipped));
  return s;
}

PretrainedReport load_pretrained(const std::string& path, Module& model, const PretrainedOptions& options) {
  return load_pretrained(load_safetensors(path), path, model, options);
}

PretrainedReport load_pretrained(const SafetensorsFile& file, const std::string& path, Module& model,
                                 const PretrainedOptions& options) {
  PretrainedReport report;
  // The file's tensors by model name ("module." dropped when every name has it).
  std::map<std::string, const Tensor*> by_name;
  report.stripped_module_prefix =
      !file.tensors.empty() && std::all_of(file.tensors.begin(), file.tensors.end(),
                                           [](const auto& e) { return starts_with(e.first, "module."); });
  for (const auto& [name, t] : file.tensors)
    by_name[report.stripped_module_prefix ? name.substr(7) : name] = &t;

  const bool skip_head = options.replace_head && !options.head_prefix.empty();
  auto is_head = [&](const std::string& name) { return skip_head && starts_with(name, options.head_prefix); };

  std::vector<std::string> missing, unexpected, mismatched, bad_dtype;
  std::set<std::string> expected;
  std::set<std::string> converted_from;
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  std::vector<Tensor*> zeroed;  // counters the file lacks: 0, as PyTorch's BatchNorm loads old files
  for (auto& [name, t] : model.state()) {
    expected.insert(name);
    if (is_head(name)) continue;
    const auto it = by_name.find(name);
    if (it == by_name.end()) {
      if (ends_with(name, "num_batches_tracked")) {
        ++report.missing_batch_counters;
        zeroed.push_back(t);
      } else {
        missing.push_back(name);
      }
      continue;
    }
    const Tensor& src = *it->second;
    if (src.shape() != t->shape()) {
      mismatched.push_back(cat(name, " (file ", src.shape().str(), ", model ", t->shape().str(), ")"));
      continue;
    }
    const bool float_pair = is_floating(src.dtype()) && is_floating(t->dtype());
    if (src.dtype() != t->dtype() && !float_pair) {
      bad_dtype.push_back(cat(name, " (file ", dtype_name(src.dtype()), ", model ", dtype_name(t->dtype()), ")"));
      continue;
    }
    if (src.dtype() != t->dtype()) converted_from.insert(safetensors_dtype_name(src.dtype()));
    copies.emplace_back(t, &src);
  }
  for (const auto& [name, t] : by_name) {
    if (expected.count(name)) {
      if (is_head(name)) report.head_skipped.push_back(name);
      continue;
    }
    if (is_head(name)) {
      report.head_skipped.push_back(name);  // e.g. a head with a bias the new one lacks
    } else {
      unexpected.push_back(name);
    }
  }

  if (!missing.empty() || !unexpected.empty() || !mismatched.empty() || !bad_dtype.empty()) {
    std::string msg = cat(path, ": does not fit the model:");
    const char* sep = " ";
    if (!missing.empty()) msg += cat(sep, missing.size(), " missing (", some_of(missing), ")"), sep = "; ";
    if (!unexpected.empty()) msg += cat(sep, unexpected.size(), " unexpected (", some_of(unexpected), ")"), sep = "; ";
    if (!mismatched.empty())
      msg += cat(sep, mismatched.size(), " with another shape (", some_of(mismatched, 3), ")"), sep = "; ";
    if (!bad_dtype.empty()) msg += cat(sep, bad_dtype.size(), " with another dtype (", some_of(bad_dtype, 3), ")");
    msg += missing.empty() && unexpected.empty()
               ? "; check --num-layers, the width, the input channels and --head-prefix"
               : "; check --num-layers (the depth decides the block names) and --head-prefix";
    fail(msg);
  }

  // Every check passed: only now change the model.
  for (auto& [dst, src] : copies) {
    if (src->dtype() == dst->dtype()) {
      dst->copy_from(*src);
    } else {
      dst->copy_from(ops::cast(*src, dst->dtype()));
      ++report.converted;
    }
  }
  for (Tensor* t : zeroed) t->zero_();
  report.loaded = int64_t(copies.size());
  for (const std::string& d : converted_from) report.converted_from += (report.converted_from.empty() ? "" : "/") + d;
  std::sort(report.head_skipped.begin(), report.head_skipped.end());
  return report;
}

ResNetConfig InferredResNet::config() const {
  ResNetConfig c;
  c.num_layers = num_layers;
  c.width = width;
  c.stem_kernel = stem_kernel;
  c.in_channels = in_channels;
  c.num_classes = num_classes;
  c.pool = pool;
  c.variant = variant;
  return c;
}

InferredResNet infer_resnet_config(const SafetensorsFile& file, const std::string& path, const std::string& head_prefix) {
  InferredResNet r;
  // Names without a DataParallel "module." prefix.
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file.tensors) by_name[starts_with(name, "module.") ? name.substr(7) : name] = &t;
  EMBER_CHECK(file.tensors.empty() || !starts_with(file.tensors.front().first, "momentum."), path,
              " holds optimizer state (momentum.*: a .states.safetensors file), not a model");
  const auto conv1 = by_name.find("conv1.weight");
  EMBER_CHECK(conv1 != by_name.end() && conv1->second->ndim() == 4, path,
              ": no 4-d conv1.weight, so not a ResNet with torchvision's names");
  const Tensor& stem = *conv1->second;
  r.width = stem.shape()[0];
  r.in_channels = stem.shape()[1];
  r.stem_kernel = int(stem.shape()[2]);
  EMBER_CHECK((r.stem_kernel == 7 || r.stem_kernel == 3) && stem.shape()[3] == r.stem_kernel, path,
              ": conv1.weight is ", stem.shape().str(), ", not a 7x7 or 3x3 ResNet stem");
  // Blocks per stage: the largest B of "layerS.B." plus one.
  int blocks[5] = {0, 0, 0, 0, 0};
  for (const auto& [name, t] : by_name) {
    if (!starts_with(name, "layer") || name.size() < 8 || name[6] != '.') continue;
    const int stage = name[5] - '0';
    if (stage < 1 || stage > 4) continue;
    const size_t dot = name.find('.', 7);
    if (dot == std::string::npos) continue;
    int b = 0;
    bool digits = dot > 7;
    for (size_t i = 7; i < dot; ++i) {
      if (name[i] < '0' || name[i] > '9' || b > 100000) digits = false;
      else b = b * 10 + (name[i] - '0');
    }
    if (digits) blocks[stage] = std::max(blocks[stage], b + 1);
    if (ends_with(name, ".conv3.weight")) r.bottleneck = true;
  }
  const int stages = blocks[4] > 0 ? 4 : 3;
  for (int s = 1; s <= stages; ++s)
    EMBER_CHECK(blocks[s] > 0, path, ": no blocks in layer", s, " (the names are not a torchvision ResNet's)");
  const int total = blocks[1] + blocks[2] + blocks[3] + blocks[4];
  if (stages == 3) {
    EMBER_CHECK(!r.bottleneck && blocks[1] == blocks[2] && blocks[2] == blocks[3] && r.stem_kernel == 3, path,
                ": three stages of ", blocks[1], ", ", blocks[2], ", ", blocks[3],
                " blocks are not a CIFAR-style ResNet (n basic blocks per stage, 3x3 stem)");
    r.num_layers = 6 * blocks[1] + 2;
  } else {
    r.num_layers = (r.bottleneck ? 3 : 2) * total + 2;
    const std::array<int, 4> got{blocks[1], blocks[2], blocks[3], blocks[4]};
    const std::map<int, std::array<int, 4>> known = {
        {18, {2, 2, 2, 2}}, {34, {3, 4, 6, 3}}, {50, {3, 4, 6, 3}}, {101, {3, 4, 23, 3}}, {152, {3, 8, 36, 3}}};
    const auto k = known.find(r.num_layers);
    EMBER_CHECK(k != known.end() && k->second == got && r.bottleneck == (r.num_layers >= 50), path, ": stages of ",
                got[0], ", ", got[1], ", ", got[2], ", ", got[3], r.bottleneck ? " bottleneck" : " basic",
                " blocks are not a ResNet depth ember builds (18, 34, 50, 101, 152)");
  }
  if (const auto fc = by_name.find(head_prefix + "weight"); fc != by_name.end() && fc->second->ndim() == 2)
    r.num_classes = fc->second->shape()[0];
  if (const auto pool = file.metadata.find("pool"); pool != file.metadata.end())
    r.pool = parse_head_pool(pool->second, path + ": metadata");
  if (const auto v = file.metadata.find("variant"); v != file.metadata.end())
    r.variant = parse_resnet_variant(v->second, path + ": metadata");
  else if (by_name.count("input_bn.weight"))
    r.variant = ResNetVariant::mxnet_preact;
  else if (by_name.count("layer1.0.conv1.bias"))
    r.variant = ResNetVariant::gluon_v1;
  return r;
}

}  // namespace ember::net
