// net/finetune.cpp — freezing and unfreezing a model's backbone.
#include "net/finetune.h"

#include "net/layers.h"

namespace ember::net {

bool in_head(const std::string& name, const std::string& head_prefix) {
  return !head_prefix.empty() && name.rfind(head_prefix, 0) == 0;
}

BackboneSplit set_backbone_frozen(Module& model, const std::string& head_prefix, bool frozen) {
  BackboneSplit split;
  for (auto& p : model.named_parameters()) {
    if (in_head(p.name, head_prefix)) {
      ++split.head_parameters;
      split.head_elements += p.tensor->numel();
      continue;
    }
    ++split.backbone_parameters;
    split.backbone_elements += p.tensor->numel();
    p.tensor->set_grad(Tensor());
    p.tensor->set_requires_grad(!frozen);
  }
  EMBER_CHECK(split.head_parameters > 0, "fine-tuning: no parameter's name starts with the head prefix \"", head_prefix,
              "\" (the classifier of a torchvision ResNet is \"fc.\")");
  // A module name "fc" covers "fc.weight": compare with the prefix's dots.
  for (auto& [name, m] : model.named_modules()) {
    auto* bn = dynamic_cast<BatchNorm2d*>(m);
    if (!bn || in_head(name + ".", head_prefix)) continue;
    bn->frozen_statistics = frozen;
    ++split.backbone_batch_norms;
  }
  return split;
}

}  // namespace ember::net
