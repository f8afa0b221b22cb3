// net/mxnet_resnet.h — MXNet's ResNets in ember: their parameter files read
// as ember checkpoints, and ember checkpoints written back as MXNet files.
//
// Two kinds of MXNet files (net/mxnet_params.h holds the format):
//   symbolic  prefix-EEEE.params (+ prefix-symbol.json) of Module.save_checkpoint,
//             for the pre-activation ResNet of example/image-classification
//             symbols/resnet.py (train_imagenet.py --network resnet, fine-tune.py
//             and the model-zoo checkpoints): names "arg:stage1_unit1_conv1_weight",
//             "aux:bn0_moving_mean", ...; variant mxnet-preact.
//   gluon     a Gluon model-zoo resnet*_v1 saved with save_parameters: names
//             "features.0.weight", "features.4.0.body.0.weight", "output.bias", ...;
//             variant gluon-v1.
// The names map one to one onto ember's (net/resnet.h):
//   symbolic                          ember
//   bn_data_{gamma,beta,moving_mean,moving_var}  input_bn.{weight,bias,running_mean,running_var}
//   conv0_weight, bn0_*               conv1.weight, bn1.*
//   stageS_unitU_bnK_*, _convK_weight layerS.(U-1).bnK.*, .convK.weight
//   stageS_unitU_sc_weight            layerS.(U-1).shortcut.weight
//   bn1_*                             final_bn.*
//   fc1_* (fc_* after fine-tune.py)   fc.*
//   gluon                             ember
//   features.0.weight, features.1.*   conv1.weight, bn1.*  (gamma->weight, beta->bias)
//   features.(3+S).B.body.{0,1,3,4,6,7}  layerS.B.{conv1,bn1,conv2,bn2,conv3,bn3}
//   features.(3+S).B.downsample.{0,1} layerS.B.downsample.{0,1}
//   output.*                          fc.*
// (a thumbnail net, 3x3 stem without batch norm and pool, starts its stages
// at features.1). bn_data's stored gamma is ignored and read as 1, as MXNet
// does with fix_gamma=True.
#pragma once
#include <string>

#include "net/resnet.h"
#include "net/safetensors.h"

namespace ember::net {

enum class MxnetKind { symbolic, gluon };

// The tensors of an MXNet .params file under ember's names (f32 CPU
// tensors), with metadata: "variant", "mxnet_kind" ("symbolic"/"gluon"),
// "network" "resnet", and the input statistics the MXNet recipes use in
// 0-255 units ("input_mean"/"input_std": train_imagenet.py's 123.68,
// 116.779, 103.939 / 1 for symbolic files, raw pixels (0 / 1) for a
// one-channel symbolic net, ImageNet's mean/std for Gluon; flags override).
// A symbolic file must have its prefix-symbol.json beside it (as
// fine-tune.py needs): its variables must be the file's parameters and its
// operators ones the pre-activation ResNet has. Errors name the file and
// the names that do not fit.
SafetensorsFile read_mxnet_resnet(const std::string& params_path);

// For a symbolic prefix-EEEE.params: prefix-symbol.json.
std::string mxnet_symbol_path(const std::string& params_path);

// Reads an ember checkpoint file or an MXNet .params (told apart by the
// first bytes): what predict and finetune_resnet load.
SafetensorsFile load_model_file(const std::string& path);

// Writes the model tensors of `checkpoint` (an ember ResNet checkpoint of
// variant mxnet-preact or gluon-v1; torchvision is refused: MXNet has no such
// ResNet) as the MXNet .params file of that variant (symbolic: arg:/aux:
// names; gluon: save_parameters' names), so that MXNet's resnet.py symbol or
// Gluon's resnet*_v1 loads it. A symbolic file named prefix-EEEE.params with
// a `symbol_template` (the prefix-symbol.json of the MXNet checkpoint the
// model was fine-tuned from) also gets its prefix-symbol.json: the template
// with the classifier's num_hidden set to the model's classes, so that
// mx.model.load_checkpoint(prefix, EEEE) loads the pair; the head keeps the
// template's name (fc1 in resnet.py, fc after fine-tune.py). Without a
// template the head is fc1 and no symbol is written. Both files are written
// atomically. Returns the kind written.
struct MxnetExport {
  MxnetKind kind = MxnetKind::symbolic;
  std::string symbol_path;  // the symbol written, or ""
};
MxnetExport write_mxnet_resnet(const SafetensorsFile& checkpoint, const std::string& source,
                               const std::string& params_path, const std::string& symbol_template = "");

}  // namespace ember::net
