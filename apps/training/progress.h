// apps/training/progress.h — what a long run shows and records while it trains:
// the progress bar redrawn in place on a terminal, and the metrics file.
//
// Output modes (apps/training/fit.cpp): `lines` prints MXNet's Speedometer
// lines every --disp-batches (stdout is not a terminal: logs, pipes, CI);
// `bar` redraws one line in place with the epoch's progress, img/s and the
// ETAs of the epoch and of the whole run (a terminal); `quiet` prints only
// the per-epoch lines. The epoch summary lines are the same in every mode.
//
// The metrics file (--metrics run.jsonl) holds one JSON object per line:
//   {"kind":"start", ...}       the command line, when the run (or a resumed part) starts
//   {"kind":"step", ...}        every --disp-batches steps: step, epoch, batch, loss, train_accuracy,
//                               lr, momentum, loss_scale, img_per_sec, wall_time
//   {"kind":"epoch", ...}       every epoch: step, epoch, loss, train_accuracy, val_accuracy, val_top5,
//                               lr, momentum, img_per_sec, epoch_time, wall_time, peak_rss_mb,
//                               data_wait_share
//   {"kind":"time_to_accuracy", ...}  target, seconds, epochs, step, wall_time
// wall_time is the run's training time in seconds, continued across resumes.
// A resumed run appends; build/plot_metrics keeps the records of the latest
// part where steps repeat.
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "net/json.h"

namespace ember::apps {

enum class ProgressMode { lines, bar, quiet };
// quiet wins; otherwise a terminal gets the bar and anything else the lines.
ProgressMode choose_progress_mode(bool quiet, std::FILE* out);

// "0:07", "4:05", "1:02:03"; "?" for a negative or non-finite time.
std::string format_duration(double seconds);

struct ProgressView {
  int epoch = 0, num_epochs = 1;
  int64_t batch = 0, batches = 1;    // done / in the epoch
  double img_per_sec = 0;            // over the epoch so far
  double loss = 0, accuracy = 0;     // over the epoch so far
  double epoch_eta = -1, run_eta = -1;  // seconds; < 0: not known yet
};
// One line, at most `width` columns:
//   Epoch 3/10 [##########..........]  234/468  1123 img/s  loss 0.412  acc 0.881  ETA 0:21  run 5:12
std::string progress_bar_text(const ProgressView& view, int width = 100);

// Redraws the bar in place ("\r" + text + erase to the end of the line), at
// most every 0.2 s, and erases it before other lines are printed.
class ProgressBar {
 public:
  explicit ProgressBar(std::FILE* out) : out_(out) {}
  void update(const ProgressView& view, bool force = false);
  void clear();  // erases the bar (if drawn) so the next line starts clean

 private:
  std::FILE* out_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

// The --metrics file, opened for appending; every record is one line,
// flushed at once (a crash loses nothing written). Non-finite numbers are
// written as null. An empty path disables it.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  bool enabled() const { return file_ != nullptr; }
  void write(json::Object record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};
// A number for a metrics record: null when not finite.
json::Value metric(double v);

// The process's peak resident memory so far, in MiB (getrusage).
double peak_rss_mib();

}  // namespace ember::apps
