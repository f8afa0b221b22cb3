// apps/finetune_resnet.cpp — fine-tune a pretrained ResNet on new classes
// (MXNet's fine-tune.py; fast.ai's freeze / unfreeze / discriminative lr).
//
//   build/finetune_resnet --pretrained-model resnet50.safetensors --num-classes 257
//       --data-train caltech-train.erec --data-val caltech-val.erec --gpus 0,1 --precision fp16
//   build/finetune_resnet --pretrained-model pre-0003.safetensors --classes 5,6,7,8,9
//       --freeze-backbone 1 --unfreeze-epoch 2 --backbone-lr-mult 0.1
//   build/finetune_resnet --pretrained-model resnet-152-0000.params --num-classes 20
//       --data-train new-train.erec --export-mxnet resnet-152-new-0005.params
//
// The pretrained file is a torchvision / timm ResNet state_dict saved as
// safetensors, an ember checkpoint, or MXNet parameters (net/mxnet_resnet.h:
// a symbolic resnet.py checkpoint prefix-EEEE.params beside its
// prefix-symbol.json, or a Gluon resnet*_v1 save_parameters file), whose
// ResNet variant the model takes. Its tensor names and shapes decide
// the structure (depth, width, stem; --num-layers must agree when given);
// what an ember checkpoint's metadata records of its training (image shape,
// validation resize, normalisation, the head's pooling) is taken unless the
// flags give it (apps/training/pretrained_settings.h), and one line says
// what was taken from where. Every tensor is loaded except the head
// (--head-prefix, "fc."), which is replaced by a fresh one with the data's
// classes. Everything else is
// train_resnet's flow (apps/training/train_program.h): the same data flags,
// fp16/bf16, --gpus, data-parallel workers, checkpoints and --load-epoch.
// --export-mxnet FILE writes the fine-tuned model of an MXNet variant back
// as MXNet parameters at the end.
#include "apps/training/distributed.h"
#include "apps/training/nccl_factory.h"
#include "apps/training/pretrained_settings.h"
#include "apps/training/train_program.h"
#include <filesystem>

#include "net/checkpoint.h"
#include "net/finetune.h"
#include "net/mxnet_resnet.h"
#include "net/pretrained.h"

namespace {

using namespace ember;

struct FineTuneSettings {
  std::string pretrained_model;
  int pretrained_epoch = 0;
  std::string head_prefix = "fc.";
  bool freeze_backbone = false;
  int unfreeze_epoch = 0;
  double backbone_lr_mult = 1.0;
  std::string export_mxnet;
  // Read once in adopt, used again in configure and prepare.
  std::string path;
  SafetensorsFile file;
  net::InferredResNet inferred;
};

void declare(apps::Flags& f, FineTuneSettings& s) {
  f.group("fine-tuning");
  f.add("pretrained-model", &s.pretrained_model,
        "pretrained weights: a .safetensors file (torchvision/timm names), MXNet .params (resnet.py "
        "prefix-EEEE.params with its -symbol.json, or Gluon resnet*_v1), or an ember --model-prefix with "
        "--pretrained-epoch");
  f.add("pretrained-epoch", &s.pretrained_epoch, "with a prefix: load PREFIX-EEEE.safetensors of this epoch");
  f.add("head-prefix", &s.head_prefix, "names of the classifier that is replaced by a fresh --num-classes head");
  f.add("freeze-backbone", &s.freeze_backbone,
        "1: train the head only (no backbone gradients or optimizer state; its batch norms keep their statistics)");
  f.add("unfreeze-epoch", &s.unfreeze_epoch, "> 0: the backbone is frozen before this epoch, then everything trains");
  f.add("backbone-lr-mult", &s.backbone_lr_mult, "the backbone's learning rate is --lr times this (e.g. 0.1)");
  f.add("export-mxnet", &s.export_mxnet,
        "at the end, write the model as MXNet parameters to this file (MXNet variants only: a symbolic "
        "prefix-EEEE.params, arg:/aux: names; a Gluon resnet*_v1 save_parameters file)");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool file_exists(const std::string& path) { return std::filesystem::is_regular_file(path); }

void validate(const FineTuneSettings& s) {
  EMBER_CHECK(!s.pretrained_model.empty(), "--pretrained-model is required (a .safetensors file or a model prefix)");
  EMBER_CHECK(s.pretrained_epoch == 0 || !ends_with(s.pretrained_model, ".safetensors"), "--pretrained-epoch ",
              s.pretrained_epoch, " takes a model prefix (ck/pre for ck/pre-0004.safetensors), not the file ",
              s.pretrained_model);
  EMBER_CHECK(s.pretrained_epoch > 0 || file_exists(s.pretrained_model) ||
                  ends_with(s.pretrained_model, ".safetensors"),
              s.pretrained_model, ": no such file (for an ember --model-prefix, add --pretrained-epoch E)");
  EMBER_CHECK(s.pretrained_epoch >= 0, "--pretrained-epoch must be >= 0");
  EMBER_CHECK(!s.head_prefix.empty(), "--head-prefix must not be empty");
  EMBER_CHECK(s.unfreeze_epoch >= 0, "--unfreeze-epoch must be >= 0");
  EMBER_CHECK(s.backbone_lr_mult >= 0, "--backbone-lr-mult must be >= 0");
}

// Before the data: the pretrained file's depth, and what it was trained with
// unless the flags say otherwise; returns the line that says so.
std::string adopt(FineTuneSettings& s, apps::TrainSettings& train, const apps::Flags& flags) {
  s.path = s.pretrained_epoch > 0 ? net::checkpoint_path(s.pretrained_model, s.pretrained_epoch) : s.pretrained_model;
  s.file = net::load_model_file(s.path);
  s.inferred = net::infer_resnet_config(s.file, s.path, s.head_prefix);
  return apps::adopt_pretrained_settings(train, flags, s.file, s.path, s.inferred);
}

// The pretrained file decides the structure; the data decides the head.
void configure(FineTuneSettings& s, net::ResNetConfig& cfg, const apps::TrainingData& data, std::FILE* log) {
  const net::InferredResNet& r = s.inferred;
  EMBER_CHECK(cfg.num_layers == 0 || cfg.num_layers == r.num_layers, s.path, " holds a ResNet-", r.num_layers,
              ", not the --num-layers ", cfg.num_layers, " asked for");
  EMBER_CHECK(r.num_classes > 0, s.path, ": no classifier ", s.head_prefix, "weight: --head-prefix must name the ",
              "final fully-connected layer (fc. in torchvision and timm ResNets)");
  EMBER_CHECK(r.in_channels == data.channels, s.path, " takes ", r.in_channels, "-channel input but the data has ",
              data.channels, " channels", data.channels == 1 ? "" : " (record data: --image-shape sets the channels)");
  cfg.num_layers = r.num_layers;
  cfg.width = r.width;
  cfg.stem_kernel = r.stem_kernel;
  cfg.variant = r.variant;
  EMBER_CHECK(s.export_mxnet.empty() || r.variant != net::ResNetVariant::torchvision, "--export-mxnet: ", s.path,
              " holds a torchvision ResNet, which MXNet does not build (only gluon-v1 and mxnet-preact models export)");
  // The head's pooling (cfg.pool) and the input normalisation are the
  // settings' (adopt: the file's unless the flags gave them).
  std::fprintf(log, "pretrained: %s: ResNet-%d (%s%s, width %lld, %dx%d stem, %lld-channel input%s%s)\n",
               s.path.c_str(), r.num_layers,
               r.variant == net::ResNetVariant::torchvision ? "" : cat(net::resnet_variant_name(r.variant), ", ").c_str(),
               r.bottleneck ? "bottleneck" : "basic blocks", (long long)r.width, r.stem_kernel,
               r.stem_kernel, (long long)r.in_channels,
               r.num_classes > 0 ? cat(", ", r.num_classes, "-class head").c_str() : ", no head",
               r.pool == net::HeadPool::concat ? ", concat pool" : "");
}

void prepare(FineTuneSettings& s, net::ResNet& model, bool resuming, apps::FitOptions& fo, std::FILE* log) {
  if (resuming) {
    std::fprintf(log, "pretrained: not loaded: --load-epoch resumes from this run's own checkpoint\n");
  } else {
    net::PretrainedOptions po;
    po.head_prefix = s.head_prefix;
    po.replace_head = true;
    const net::PretrainedReport report = net::load_pretrained(s.file, s.path, model, po);
    std::fprintf(log, "pretrained: %s; new head %s* for %lld classes\n", report.describe().c_str(),
                 s.head_prefix.c_str(), (long long)model.config().num_classes);
  }
  s.file = SafetensorsFile();  // the weights are in the model now
  // Only the classifier can be replaced: --head-prefix must select the fc layer and nothing else.
  for (auto& p : model.named_parameters())
    EMBER_CHECK(!net::in_head(p.name, s.head_prefix) || p.name.rfind("fc.", 0) == 0, "--head-prefix ", s.head_prefix,
                " selects ", p.name, ", which is not the classifier: the head is the final fully-connected layer (fc.)");
  fo.finetune.head_prefix = s.head_prefix;
  fo.finetune.freeze_backbone = s.freeze_backbone;
  fo.finetune.unfreeze_epoch = s.unfreeze_epoch;
  fo.finetune.backbone_lr_mult = s.backbone_lr_mult;
  fo.checkpoint_metadata.push_back({"pretrained_model", s.path});
}

}  // namespace

int main(int argc, char** argv) {
  try {
    FineTuneSettings ft;
    apps::TrainProgram program;
    program.name = "finetune_resnet";
    program.summary =
        "Fine-tune a pretrained ResNet (torchvision/timm safetensors, MXNet .params or ember checkpoint) on new classes.";
#if defined(EMBER_CUDA) && defined(EMBER_NCCL)
    program.nccl = ember::apps::nccl_comm_factory();
#endif
    // Shorter and gentler than training from scratch: the features exist already.
    program.defaults = [](apps::TrainSettings& s) {
      s.num_layers = 0;  // the pretrained file's
      s.num_epochs = 5;
      s.lr = 0.05;
      s.label_smoothing = 0.0;
    };
    program.declare_flags = [&](apps::Flags& f) { declare(f, ft); };
    program.validate = [&](const apps::TrainSettings& s) {
      validate(ft);
      EMBER_CHECK(ft.unfreeze_epoch < s.num_epochs, "--unfreeze-epoch ", ft.unfreeze_epoch, " is not before --num-epochs ",
                  s.num_epochs, ": the backbone would never train (--freeze-backbone 1 trains the head alone)");
      if (ft.backbone_lr_mult != 1.0 && ft.freeze_backbone && ft.unfreeze_epoch == 0)
        std::fprintf(stderr, "finetune_resnet: warning: --backbone-lr-mult has no effect: the backbone stays frozen "
                             "(add --unfreeze-epoch E to train it after the head)\n");
    };
    program.verb = "fine-tuning";
    program.adopt = [&](apps::TrainSettings& s, const apps::Flags& f) { return adopt(ft, s, f); };
    program.configure = [&](net::ResNetConfig& cfg, const apps::TrainSettings&, const apps::TrainingData& d,
                            std::FILE* log) { configure(ft, cfg, d, log); };
    program.prepare = [&](net::ResNet& model, bool resuming, apps::FitOptions& fo, std::FILE* log) {
      prepare(ft, model, resuming, fo, log);
    };
    program.finish = [&](const apps::FitResult& r, std::FILE* out) {
      if (ft.export_mxnet.empty()) return;
      EMBER_CHECK(!r.last_checkpoint.empty(), "--export-mxnet: the run saved no checkpoint to export");
      // The pretrained MXNet checkpoint's symbol, retargeted to the new classes, goes beside the export.
      const std::string symbol = net::mxnet_symbol_path(ft.path);
      const bool from_symbolic = !symbol.empty() && std::filesystem::is_regular_file(symbol);
      const net::MxnetExport e = net::write_mxnet_resnet(load_safetensors(r.last_checkpoint), r.last_checkpoint,
                                                         ft.export_mxnet, from_symbolic ? symbol : "");
      std::fprintf(out, "exported %s as MXNet %s parameters: %s%s\n", r.last_checkpoint.c_str(),
                   e.kind == net::MxnetKind::gluon ? "Gluon resnet_v1" : "symbolic resnet.py", ft.export_mxnet.c_str(),
                   e.symbol_path.empty() ? (e.kind == net::MxnetKind::symbolic
                                                ? " (no symbol written: build it with resnet.py's get_symbol, head fc1)"
                                                : "")
                                         : cat(" and ", e.symbol_path).c_str());
    };
    return apps::run_train_program(program, argc, argv);
  } catch (const std::exception& e) {  // ember::Error and anything the standard library throws
    return apps::report_fatal("finetune_resnet", e);
  }
}
