// apps/plot_metrics/plot_metrics.cpp — draw the metrics files that train_resnet writes
// with --metrics as one self-contained SVG, several runs overlaid:
//
//   build/plot_metrics RUN.jsonl [RUN2.jsonl ...] -o out.svg [--title TEXT] [--label NAME ...]
//
// Four panels against the global step: training loss; train accuracy (thin)
// and validation accuracy (markers) with the time-to-accuracy target dashed;
// learning rate with momentum on a right axis; throughput in images/s.
// apps/plot_metrics/metrics_file.h reads the files (resumed runs included),
// apps/plot_metrics/svg_plot.h draws; this file maps one onto the other and writes
// the SVG with write_file_atomic.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "apps/plot_metrics/metrics_file.h"
#include "apps/plot_metrics/svg_plot.h"
#include "engine/error.h"
#include "engine/file_io.h"

namespace {

using namespace ember;
using apps::MetricsRecord;
using apps::RunMetrics;

constexpr const char* kUsage =
    "usage: plot_metrics RUN.jsonl [RUN2.jsonl ...] -o OUT.svg [--title TEXT] [--label NAME ...]\n"
    "\n"
    "Draws training metrics (the JSONL files train_resnet --metrics writes) as one\n"
    "standalone SVG of four panels against the global step: training loss; train and\n"
    "validation accuracy with the time-to-accuracy target; learning rate and momentum;\n"
    "throughput. Several files are overlaid in different colours. A resumed run that\n"
    "appended to its file is shown as the last run left it.\n"
    "\n"
    "  -o, --output OUT.svg  the SVG to write (required; written atomically)\n"
    "  --title TEXT          the figure's title (default: \"Training metrics\")\n"
    "  --label NAME          the legend name of a run, once per file in file order\n"
    "                        (default: the file's name without .jsonl)\n"
    "  -h, --help            this text\n";

// Tableau 10: distinct on white, and for most colour-blind readers.
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Options {
  std::vector<std::string> files, labels;
  std::string output, title = "Training metrics";
  bool help = false;
};

Options parse_args(int argc, char** argv) {
  Options o;
  bool flags_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    if (flags_done || arg == "-" || arg.empty() || arg[0] != '-') {
      o.files.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    bool inline_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    if (arg != "-o" && arg != "--output" && arg != "--title" && arg != "--label")
      fail(cat("unknown option '", arg, "' (see --help)"));
    if (!inline_value) {
      EMBER_CHECK(i + 1 < argc, arg, " needs a value");
      value = argv[++i];
    }
    if (arg == "--title") o.title = value;
    else if (arg == "--label") o.labels.push_back(value);
    else o.output = value;
  }
  EMBER_CHECK(!o.files.empty(), "no metrics file given (see --help)");
  EMBER_CHECK(!o.output.empty(), "-o OUT.svg is required (see --help)");
  EMBER_CHECK(o.labels.empty() || o.labels.size() == o.files.size(), "--label given ", o.labels.size(),
              " times for ", o.files.size(), " files (one per file, in file order)");
  return o;
}

// Legend names: --label, else the file names without .jsonl; whole paths
// when two files would get the same name.
std::vector<std::string> run_labels(const Options& o) {
  if (!o.labels.empty()) return o.labels;
  std::vector<std::string> names;
  for (const std::string& f : o.files) {
    const std::filesystem::path p(f);
    names.push_back(p.extension() == ".jsonl" ? p.stem().string() : p.filename().string());
  }
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = 0; j < names.size(); ++j)
      if (i != j && names[i] == names[j]) return o.files;
  return names;
}

// (step, field) points of records.
std::vector<apps::svg::Point> points(const std::vector<MetricsRecord>& records, double MetricsRecord::*field) {
  std::vector<apps::svg::Point> out;
  out.reserve(records.size());
  for (const MetricsRecord& r : records) out.push_back({double(r.step), r.*field});
  return out;
}

bool any_finite(const std::vector<MetricsRecord>& records, double MetricsRecord::*field) {
  for (const MetricsRecord& r : records)
    if (std::isfinite(r.*field)) return true;
  return false;
}

std::string fixed(double v, int decimals) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// An empty panel plotted against the step.
apps::svg::Panel panel(const std::string& title, const std::string& y_title, bool y_from_zero) {
  apps::svg::Panel p;
  p.title = title;
  p.x_title = "step";
  p.y_title = y_title;
  p.y_from_zero = y_from_zero;
  return p;
}

apps::svg::Figure make_figure(const std::vector<RunMetrics>& runs, const std::vector<std::string>& labels,
                              const std::string& title) {
  using namespace apps::svg;
  Figure fig;
  fig.title = title;
  if (runs.size() == 1 && !runs[0].program.empty()) {
    fig.subtitle = runs[0].program + " " + runs[0].args;
    if (fig.subtitle.size() > 180) fig.subtitle = fig.subtitle.substr(0, 177) + "...";
  }
  Panel loss = panel("Training loss", "loss", true), acc = panel("Accuracy", "accuracy", false),
        lr = panel("Learning rate", "learning rate", true), speed = panel("Throughput", "images / s", true);
  lr.y2_title = "momentum";
  bool any_momentum = false, any_target = false, any_step_records = false, any_train = false, any_val = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunMetrics& run = runs[i];
    const std::string color = kColors[i % std::size(kColors)];
    // Runs without step records (logging only per epoch) plot their epoch records.
    const auto& per_step = run.steps.empty() ? run.epochs : run.steps;
    any_step_records = any_step_records || !run.steps.empty();
    any_train = any_train || any_finite(per_step, &MetricsRecord::train_accuracy);
    any_val = any_val || any_finite(run.epochs, &MetricsRecord::val_accuracy);
    loss.lines.push_back({points(per_step, &MetricsRecord::loss), color});
    acc.lines.push_back({points(per_step, &MetricsRecord::train_accuracy), color, 1.0, 0.55});
    acc.lines.push_back({points(run.epochs, &MetricsRecord::val_accuracy), color, 2.0, 1.0, false, true});
    lr.lines.push_back({points(per_step, &MetricsRecord::lr), color});
    if (any_finite(per_step, &MetricsRecord::momentum)) {
      lr.lines.push_back({points(per_step, &MetricsRecord::momentum), color, 1.2, 1.0, true, false, true});
      any_momentum = true;
    }
    speed.lines.push_back({points(per_step, &MetricsRecord::img_per_sec), color});
    std::string legend = labels[i];
    for (auto it = run.epochs.rbegin(); it != run.epochs.rend(); ++it)
      if (std::isfinite(it->val_accuracy)) {
        legend += " (val " + fixed(it->val_accuracy, 4) + " at step " + std::to_string(it->step) + ")";
        break;
      }
    for (auto it = run.time_to_accuracy.rbegin(); it != run.time_to_accuracy.rend(); ++it)
      if (std::isfinite(it->target)) {
        std::string text = "target " + fixed(it->target, 3);
        if (std::isfinite(it->seconds)) text += " in " + fixed(it->seconds, 1) + " s";
        if (runs.size() > 1) text = labels[i] + ": " + text;
        acc.references.push_back({it->target, color, text});
        any_target = true;
        break;
      }
    fig.legend.push_back({legend, color});
  }
  if (any_train) acc.key.push_back({any_step_records ? "train (per step)" : "train", 1.0});
  if (any_val) acc.key.push_back({"validation (per epoch)", 2.0, false, true});
  if (any_target) acc.key.push_back({"time-to-accuracy target", 1.2, true});
  if (any_momentum) {
    lr.title = "Learning rate and momentum";
    lr.key = {{"learning rate"}, {"momentum (right axis)", 1.2, true}};
  }
  fig.panels = {loss, acc, lr, speed};
  return fig;
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (o.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::vector<RunMetrics> runs;
  for (const std::string& f : o.files) runs.push_back(apps::read_metrics_file(f));
  const std::string svg = apps::svg::render_svg(make_figure(runs, run_labels(o), o.title));
  write_file_atomic(o.output, svg.data(), svg.size());
  std::printf("plot_metrics: wrote %s (%zu run%s, %zu bytes)\n", o.output.c_str(), runs.size(),
              runs.size() == 1 ? "" : "s", svg.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "plot_metrics: %s\n", e.what());
    return 1;
  }
}
