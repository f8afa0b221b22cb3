// apps/plot_metrics/metrics_file.h — reading a training metrics file (the JSONL
// train_resnet writes with --metrics) into per-run record series, for
// plot_metrics (apps/plot_metrics/plot_metrics.cpp draws them with apps/plot_metrics/svg_plot.h).
//
// One JSON object per line; "kind" says what it is: "start", "step",
// "epoch", "time_to_accuracy". Records of other kinds and keys this reader
// does not know are ignored; absent values, null, and non-finite numbers
// (NaN/Infinity tokens or the strings "nan"/"inf", as other writers emit
// them) read as NaN, which a plot draws as a gap. "step" (the global
// optimizer step, the x axis) is required on step and epoch records.
//
// A resumed run appends to the same file, so steps may repeat or go back.
// The file is read as the last run left it: a record whose step is <= the
// step of the previous record of its kind replaces, from that step on, what
// the earlier run wrote (its records of that kind at steps >= it, and of the
// other kinds at steps > it, so an epoch record at the same step as the
// step record before it is not mistaken for a resume).
//
// Every error is an ember::Error of one line, "PATH:LINE: what was wrong".
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace ember::apps {

constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// A "step" or an "epoch" record; a value the record lacks is NaN.
struct MetricsRecord {
  int64_t step = 0;
  double epoch = kNoValue, batch = kNoValue;
  double loss = kNoValue, train_accuracy = kNoValue, val_accuracy = kNoValue, val_top5 = kNoValue;
  double lr = kNoValue, momentum = kNoValue, loss_scale = kNoValue, img_per_sec = kNoValue;
  double epoch_time = kNoValue, wall_time = kNoValue, peak_rss_mb = kNoValue, data_wait_share = kNoValue;
};

struct TimeToAccuracy {
  double target = kNoValue, seconds = kNoValue, epochs = kNoValue;
  int64_t step = -1;  // -1: the record had no step (then no resume removes it)
};

// One metrics file, as its last run left it; each vector in step order.
struct RunMetrics {
  std::string path;
  std::string program, args;  // from the last "start" record ("" if none)
  std::vector<MetricsRecord> steps, epochs;
  std::vector<TimeToAccuracy> time_to_accuracy;
};

// Parses the text of a metrics file; `path` names it in errors. Throws when
// a line is not a JSON object, a known key has the wrong type, or the file
// has no step or epoch record.
RunMetrics parse_metrics(std::string_view text, const std::string& path);
// Reads and parses the file at `path`.
RunMetrics read_metrics_file(const std::string& path);

}  // namespace ember::apps
