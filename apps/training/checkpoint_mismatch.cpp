// apps/training/checkpoint_mismatch.cpp — the likely cause of a checkpoint
// that does not fit the model a run builds (apps/training/checkpoint_mismatch.h).
#include "apps/training/checkpoint_mismatch.h"

#include <cstdlib>
#include <map>
#include <optional>

#include "net/checkpoint.h"
#include "net/pretrained.h"

namespace ember::apps {

namespace {

// One number the checkpoint records about its model: the metadata's, else
// what the tensors say (inferred: nullptr when they do not say); 0 when neither.
struct Recorded {
  int64_t value = 0;
  const char* from = "";
};
Recorded recorded(const std::map<std::string, std::string>& meta, const char* key, const int64_t* inferred) {
  if (const auto it = meta.find(key); it != meta.end()) {
    char* end = nullptr;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (!it->second.empty() && *end == '\0' && v > 0) return {v, "its metadata"};
  }
  if (inferred && *inferred > 0) return {*inferred, "its tensors"};
  return {};
}

}  // namespace

std::string checkpoint_mismatch_cause(const SafetensorsFile& file, const net::ResNet& model) {
  std::optional<net::InferredResNet> r;
  try {
    r = net::infer_resnet_config(file, "checkpoint");
  } catch (const Error&) {
    // Not a ResNet's names: only the metadata can tell.
  }
  const int64_t layers = r ? r->num_layers : 0, classes = r ? r->num_classes : 0, in = r ? r->in_channels : 0,
                stem = r ? r->stem_kernel : 0, width = r ? r->width : 0;
  const auto& m = file.metadata;
  const net::ResNetConfig& c = model.config();
  const int64_t built_stem = model.conv1->weight.shape()[2], built_width = model.conv1->weight.shape()[0];
  if (const Recorded v = recorded(m, "num_layers", &layers); v.value && v.value != c.num_layers)
    return cat("the checkpoint was written by resnet-", v.value, " (", v.from, ") and this run builds resnet-",
               c.num_layers, ": pass --num-layers ", v.value);
  if (const Recorded v = recorded(m, "num_classes", &classes); v.value && v.value != c.num_classes)
    return cat("the checkpoint has a ", v.value, "-class head (", v.from, ") and this run's data has ", c.num_classes,
               " classes: resume on the data it was trained on (the same --classes, --num-classes or record files)");
  if (const Recorded v = recorded(m, "in_channels", &in); v.value && v.value != c.in_channels)
    return cat("the checkpoint takes ", v.value, "-channel input (", v.from, ") and this run's data has ",
               c.in_channels, c.in_channels == 1 ? " channel" : " channels",
               v.value == 3 || v.value == 1 ? cat(": pass --image-shape ", v.value, ",H,W") : "");
  if (const Recorded v = recorded(m, "stem_kernel", &stem); v.value && v.value != built_stem) {
    const Recorded size = recorded(m, "image_size", nullptr);
    return cat("the checkpoint has a ", v.value, "x", v.value, " stem (", v.from, size.value ? cat("; it was trained at ",
               size.value, "x", size.value) : "", ") and this run builds a ", built_stem, "x", built_stem,
               " stem for ", c.image_size, "x", c.image_size, " input",
               size.value ? cat(": pass --image-shape ", c.in_channels, ",", size.value, ",", size.value) : "");
  }
  if (const Recorded v = recorded(m, "width", &width); v.value && v.value != built_width)
    return cat("the checkpoint's network has width ", v.value, " (", v.from, ") and this run builds width ",
               built_width);
  return "";
}

void load_resume_checkpoint(const std::string& path, net::ResNet& model) {
  try {
    net::load_model(path, model);
  } catch (const Error& e) {
    std::string cause;
    try {
      cause = checkpoint_mismatch_cause(load_safetensors(path), model);
    } catch (const Error&) {
      throw e;  // unreadable: load_model's error says why
    }
    if (cause.empty()) throw;
    fail(cat(e.what(), ": ", cause));
  }
}

}  // namespace ember::apps
