// net/checkpoint.h — model and optimizer checkpoints as safetensors files.
//
//   PREFIX-EEEE.safetensors         the model's state (parameters and buffers,
//                                   torchvision names), loadable by PyTorch
//   PREFIX-EEEE.states.safetensors  the optimizer's momentum buffers and step
//                                   count, for exact resumption
// EEEE is the number of epochs completed (MXNet's prefix-0003.params
// convention): --load-epoch 3 resumes at the start of epoch 3 (0-based).
// Both files are written atomically; loading checks every name and shape
// and reports the first mismatch with the file name.
#pragma once
#include <map>
#include <string>

#include "net/module.h"
#include "net/sgd.h"

namespace ember::net {

std::string checkpoint_path(const std::string& prefix, int epoch);
std::string optimizer_state_path(const std::string& prefix, int epoch);

// Saves the model's state() (copied to the host) with string metadata.
// `masters` (SGD::masters() in fp16/bf16 training) replace the 16-bit parameters of
// the same names, so the file holds f32 weights either way.
void save_model(const std::string& path, Module& model, const std::map<std::string, std::string>& metadata = {},
                const std::vector<std::pair<std::string, Tensor>>& masters = {});
// Loads a file written by save_model (or PyTorch's safetensors.torch.save_file
// of a state_dict): every tensor of the model must be present with its shape
// and dtype, and the file must hold nothing else. Returns the metadata.
std::map<std::string, std::string> load_model(const std::string& path, Module& model);

void save_optimizer(const std::string& path, const SGD& opt);
void load_optimizer(const std::string& path, SGD& opt);

}  // namespace ember::net
