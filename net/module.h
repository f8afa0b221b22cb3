// net/module.h — Module: the base of every layer and model.
//
// A module owns its tensors as plain members and registers pointers to them
// under names, and registers its child modules, so that the dotted names of
// the whole tree come out as PyTorch's state_dict keys ("layer1.0.conv1.weight").
// Parameters carry a weight-decay flag (off for batch-norm and bias) that the
// optimizer honours.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor.h"

namespace ember::net {

struct NamedParameter {
  std::string name;
  Tensor* tensor;
  bool decay;             // weight decay applies to this parameter
  bool keep_f32 = false;  // stays f32 in mixed precision (batch-norm gamma and beta)
};

struct NamedBuffer {
  std::string name;
  Tensor* tensor;
  bool host_only;  // stays on the CPU when the module moves (counters)
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }

  // Training mode (batch statistics) vs evaluation mode, recursively.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Every parameter / buffer of the tree with its dotted name, in
  // registration order (parents before children).
  std::vector<NamedParameter> named_parameters();
  std::vector<NamedBuffer> named_buffers();
  // Parameters and buffers together: what a checkpoint holds.
  std::vector<std::pair<std::string, Tensor*>> state();
  int64_t parameter_count();

  // Moves (copies) every parameter and buffer to a device.
  void to(Device device);
  // Stores every 4-D parameter (convolution weights) in `format`, PyTorch's
  // model.to(memory_format=...): with channels_last weights the convolutions
  // run channels-last and their outputs, and so the activations, follow.
  // Names and logical shapes stay; checkpoints are written in NCHW order
  // whatever the format (engine/tensor.h). Call before making the optimizer.
  void to_memory_format(MemoryFormat format);
  // Drops all gradients (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();
  // Calls f on this module and every descendant, parents first (PyTorch's apply).
  void apply(const std::function<void(Module&)>& f);
  // This module ("") and every descendant with its dotted name ("layer1.0.bn1"), parents first.
  std::vector<std::pair<std::string, Module*>> named_modules();

 protected:
  // Registers a member tensor as a parameter (makes it require grad).
  void register_parameter(const std::string& name, Tensor* t, bool decay, bool keep_f32 = false);
  void register_buffer(const std::string& name, Tensor* t, bool host_only = false);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }
  // Called after train() changed the mode of this module (children handled).
  virtual void on_train_mode_changed() {}

 private:
  void collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out);
  void collect_buffers(const std::string& prefix, std::vector<NamedBuffer>& out);

  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<bool> param_decay_, param_keep_f32_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<bool> buffer_host_only_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace ember::net
