// apps/training/training_checkpoint.h — the checkpoints a run resumes from:
// where they are written, what they hold, finding the latest one, and
// keeping only the last K.
//
// Every checkpoint is a pair of safetensors files (net/checkpoint.h):
//   PREFIX-EEEE.safetensors (+ .states.safetensors)          at the end of an epoch
//   PREFIX-EEEE-BBBBBB.safetensors (+ .states.safetensors)   every --checkpoint-steps
// EEEE epochs and BBBBBB batches of the next one are done. The model file
// (f32 weights, PyTorch-loadable) is written first and the states file last,
// each atomically, so a states file whose model file exists marks a complete
// checkpoint. The states file holds the optimizer's momentum and, in its
// metadata, the TrainingPosition: everything else a resumed run needs to
// continue exactly (the data order and augmentation are Philox streams of
// (seed, epoch, sample), so the seed and the position within the epoch are
// the loader's whole state).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "apps/training/cpu_choices.h"
#include "net/mixed_precision.h"
#include "net/module.h"
#include "net/sgd.h"

namespace ember::apps {

struct TrainingPosition {
  int epoch = 0;                // the epoch to continue (0-based)
  int64_t batch = 0;            // batches of it already taken from the loader
  int64_t global_step = 0;      // optimizer steps taken or skipped since the start
  double elapsed_seconds = 0;   // training wall time so far, over every resumed part
  // The running totals of the unfinished epoch (its Train-accuracy line).
  int64_t epoch_samples = 0, epoch_correct = 0;
  double epoch_loss_sum = 0;
  // The loss scaler (fp16; bf16 counts skipped steps).
  double loss_scale = 1.0;
  int64_t scaler_clean = 0, scaler_skipped = 0, scaler_consecutive = 0;
  // What the run was started with; a resume with other values warns.
  int64_t seed = 0, batch_size = 0;
  // The CPU kernel choices the run measured (apps/training/cpu_choices.h);
  // a resume takes them over.
  CpuChoices cpu;
  bool complete = true;  // false: an older states file without a position (epoch from its name, batch 0)
};

// PREFIX-EEEE-BBBBBB.safetensors
std::string step_checkpoint_path(const std::string& prefix, int epoch, int64_t batch);
// X.safetensors -> X.states.safetensors
std::string states_path_of(const std::string& model_path);

// Writes the model (f32 masters in mixed precision) and then the optimizer
// state with the position in the states file's metadata.
void save_training_checkpoint(const std::string& model_path, net::Module& model, const net::SGD& opt,
                              const std::map<std::string, std::string>& model_metadata,
                              const TrainingPosition& position);
// The position in a states file's metadata (complete = false when it has none).
TrainingPosition read_training_position(const std::string& states_path);

struct FoundCheckpoint {
  std::string model_path, states_path;
  TrainingPosition position;
};
// The latest complete checkpoint of PREFIX (by epoch, then batch), or none.
// Candidates whose states file cannot be read are reported on `warnings` and
// skipped.
std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& prefix, std::FILE* warnings = stderr);
// The checkpoints of PREFIX, oldest first (their model paths).
std::vector<std::string> list_checkpoints(const std::string& prefix);
// Deletes all but the newest `keep` checkpoints of PREFIX (both files).
// keep <= 0 keeps everything. Returns the model paths deleted.
std::vector<std::string> prune_checkpoints(const std::string& prefix, int keep);
// A checkpoint's size on disk, its model and states files together:
// "85.3 MB" (decimal megabytes), for the line that says it was saved.
std::string checkpoint_size_text(const std::string& model_path);


}  // namespace ember::apps
