// net/finetune.h — the backbone/head split of fine-tuning (MXNet's
// fine-tune.py, fast.ai's freeze/unfreeze).
//
// Everything whose name does not start with the head prefix ("fc.") is the
// backbone. A frozen backbone gets no gradients (its parameters stop
// requiring them, so backward stops at the head and the optimizer keeps no
// momentum for them) and its batch norms normalise with their running
// statistics in training mode too, leaving them unchanged: the features the
// head learns from are exactly the pretrained ones. Unfreezing undoes both.
#pragma once
#include <cstdint>
#include <string>

#include "net/module.h"

namespace ember::net {

struct BackboneSplit {
  int64_t backbone_parameters = 0;  // tensors
  int64_t head_parameters = 0;
  int64_t backbone_batch_norms = 0;
  int64_t backbone_elements = 0, head_elements = 0;  // scalars
};

bool in_head(const std::string& name, const std::string& head_prefix);

// Freezes or unfreezes the backbone; call after the model's last move or
// conversion (Module::to and convert_to_half make parameters trainable).
// Errors when no parameter is under head_prefix (nothing would train).
BackboneSplit set_backbone_frozen(Module& model, const std::string& head_prefix, bool frozen);

}  // namespace ember::net
