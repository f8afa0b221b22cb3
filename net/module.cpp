// net/module.cpp — name collection, mode switching and device moves for modules.
#include "net/module.h"

#include "engine/autograd.h"
#include "ops/ops.h"

namespace ember::net {

void Module::train(bool on) {
  training_ = on;
  on_train_mode_changed();
  for (auto& [name, child] : children_) child->train(on);
}

void Module::register_parameter(const std::string& name, Tensor* t, bool decay, bool keep_f32) {
  EMBER_CHECK(t && t->defined(), "register_parameter: '", name, "' is undefined");
  t->set_requires_grad(true);
  params_.emplace_back(name, t);
  param_decay_.push_back(decay);
  param_keep_f32_.push_back(keep_f32);
}

void Module::register_buffer(const std::string& name, Tensor* t, bool host_only) {
  EMBER_CHECK(t && t->defined(), "register_buffer: '", name, "' is undefined");
  buffers_.emplace_back(name, t);
  buffer_host_only_.push_back(host_only);
}

void Module::collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) {
  for (size_t i = 0; i < params_.size(); ++i)
    out.push_back({prefix + params_[i].first, params_[i].second, param_decay_[i], param_keep_f32_[i]});
  for (auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<NamedBuffer>& out) {
  for (size_t i = 0; i < buffers_.size(); ++i)
    out.push_back({prefix + buffers_[i].first, buffers_[i].second, buffer_host_only_[i]});
  for (auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", out);
}

std::vector<NamedParameter> Module::named_parameters() {
  std::vector<NamedParameter> out;
  collect_parameters("", out);
  return out;
}

std::vector<NamedBuffer> Module::named_buffers() {
  std::vector<NamedBuffer> out;
  collect_buffers("", out);
  return out;
}

// PyTorch's state_dict order: each module's parameters, then its buffers,
// then its children's.
std::vector<std::pair<std::string, Tensor*>> Module::state() {
  std::vector<std::pair<std::string, Tensor*>> out;
  struct Walker {
    static void walk(Module& m, const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) {
      for (auto& [name, t] : m.params_) out.emplace_back(prefix + name, t);
      for (auto& [name, t] : m.buffers_) out.emplace_back(prefix + name, t);
      for (auto& [name, child] : m.children_) walk(*child, prefix + name + ".", out);
    }
  };
  Walker::walk(*this, "", out);
  return out;
}

int64_t Module::parameter_count() {
  int64_t n = 0;
  for (auto& p : named_parameters()) n += p.tensor->numel();
  return n;
}

void Module::to(Device device) {
  for (auto& p : named_parameters()) {
    if (p.tensor->device() == device) continue;
    Tensor moved = p.tensor->detach().to(device);
    moved.set_requires_grad(true);
    *p.tensor = moved;
  }
  for (auto& b : named_buffers())
    if (!b.host_only && !(b.tensor->device() == device)) *b.tensor = b.tensor->to(device);
}

void Module::to_memory_format(MemoryFormat format) {
  NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    if (p.tensor->ndim() != 4 || p.tensor->memory_format() == format) continue;
    Tensor converted = ops::to_memory_format(p.tensor->detach(), format);
    converted.set_requires_grad(true);
    *p.tensor = converted;
  }
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.tensor->set_grad(Tensor());
}

void Module::apply(const std::function<void(Module&)>& f) {
  f(*this);
  for (auto& [name, child] : children_) child->apply(f);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  struct Walker {
    static void walk(Module& m, const std::string& name, std::vector<std::pair<std::string, Module*>>& out) {
      out.emplace_back(name, &m);
      for (auto& [child_name, child] : m.children_) walk(*child, name.empty() ? child_name : name + "." + child_name, out);
    }
  };
  Walker::walk(*this, "", out);
  return out;
}

}  // namespace ember::net
