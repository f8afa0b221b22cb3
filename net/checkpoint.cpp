// net/checkpoint.cpp — saving and strictly loading model / optimizer state.
#include "net/checkpoint.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "net/json.h"
#include "net/safetensors.h"

namespace ember::net {

std::string checkpoint_path(const std::string& prefix, int epoch) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "-%04d.safetensors", epoch);
  return prefix + buf;
}

std::string optimizer_state_path(const std::string& prefix, int epoch) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "-%04d.states.safetensors", epoch);
  return prefix + buf;
}

void save_model(const std::string& path, Module& model, const std::map<std::string, std::string>& metadata,
                const std::vector<std::pair<std::string, Tensor>>& masters) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [name, t] : model.state()) {
    const Tensor* replacement = nullptr;
    for (const auto& [master_name, master] : masters)
      if (master_name == name) replacement = &master;
    tensors.emplace_back(name, replacement ? *replacement : *t);
  }
  std::map<std::string, std::string> meta = metadata;
  meta["format"] = "pt";  // what safetensors.torch writes: PyTorch loaders accept it as a state_dict
  save_safetensors(path, tensors, meta);
}

std::map<std::string, std::string> load_model(const std::string& path, Module& model) {
  SafetensorsFile file = load_safetensors(path);
  std::set<std::string> expected;
  for (auto& [name, t] : model.state()) {
    expected.insert(name);
    const Tensor* src = file.find(name);
    EMBER_CHECK(src, path, ": missing tensor \"", name, "\" (the file does not match this model; check --num-layers",
                " and --num-classes)");
    EMBER_CHECK(src->shape() == t->shape(), path, ": tensor \"", name, "\" has shape ", src->shape().str(),
                ", the model expects ", t->shape().str());
    EMBER_CHECK(src->dtype() == t->dtype(), path, ": tensor \"", name, "\" is ", dtype_name(src->dtype()),
                ", the model expects ", dtype_name(t->dtype()));
  }
  for (auto& [name, t] : file.tensors)
    EMBER_CHECK(expected.count(name), path, ": unexpected tensor ", json::shown(name), " that this model does not have");
  // All checks passed: only now overwrite the model.
  for (auto& [name, t] : model.state()) t->copy_from(*file.find(name));
  return file.metadata;
}

void save_optimizer(const std::string& path, const SGD& opt) {
  save_safetensors(path, opt.state(), {{"steps", std::to_string(opt.steps())}, {"optimizer", "sgd"}});
}

void load_optimizer(const std::string& path, SGD& opt) {
  SafetensorsFile file = load_safetensors(path);
  int64_t steps = 0;
  if (auto it = file.metadata.find("steps"); it != file.metadata.end()) {
    char* end = nullptr;
    errno = 0;
    steps = std::strtoll(it->second.c_str(), &end, 10);
    EMBER_CHECK(!it->second.empty() && *end == '\0' && errno == 0 && steps >= 0, path,
                ": metadata 'steps' is not an integer >= 0: ", json::shown(it->second));
  }
  try {
    opt.load_state(file.tensors, steps);
  } catch (const Error& e) {
    fail(cat(path, ": ", e.what()));
  }
}

}  // namespace ember::net
