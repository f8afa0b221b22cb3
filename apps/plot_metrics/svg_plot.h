// apps/plot_metrics/svg_plot.h — line charts drawn into one standalone SVG 1.1
// string: a figure of panels in a grid, each with axes, "nice" ticks (1-2-5
// steps), grid lines, titles, lines (optionally with markers, dashed, or on a
// secondary right axis) and dashed horizontal reference lines. Knows nothing
// about training: apps/plot_metrics/plot_metrics.cpp turns metrics (metrics_file.h) into
// a Figure and writes render_svg()'s text to disk.
//
// Points whose x or y is not finite are skipped and break the line there.
// Lines with far more points than the panel has pixels are thinned to the
// first, lowest, highest and last point of each pixel column (what a
// renderer would draw anyway), so a long run logged every step stays small.
// All text goes through escape_xml().
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace ember::apps::svg {

struct Point {
  double x = 0, y = 0;
};

struct Line {
  std::vector<Point> points;
  std::string color = "#000000";
  double width = 1.5;
  double opacity = 1.0;
  bool dashed = false;
  bool markers = false;     // a dot at every point
  bool right_axis = false;  // scaled by the panel's secondary (right) axis
};

// A dashed horizontal line across the plot at `y` (left axis), labelled above its left end.
struct ReferenceLine {
  double y = 0;
  std::string color = "#000000";
  std::string label;
};

// One entry of a panel's style key (drawn in grey above the plot): what a
// thin, dashed or marked line means in this panel.
struct KeyEntry {
  std::string label;
  double width = 1.5;
  bool dashed = false;
  bool markers = false;
};

struct Panel {
  std::string title, x_title, y_title, y2_title;
  std::vector<Line> lines;
  std::vector<ReferenceLine> references;
  std::vector<KeyEntry> key;
  bool x_from_zero = true;   // the x axis includes 0
  bool x_integer = true;     // x values are counts (steps): no ticks between integers
  bool y_from_zero = false;  // the left y axis includes 0
};

// One entry of the figure's legend: a colour swatch and a label.
struct LegendEntry {
  std::string label, color;
};

struct Figure {
  std::string title, subtitle;
  int width = 1200, height = 800;
  int columns = 2;  // panels fill rows of this many
  std::vector<LegendEntry> legend;
  std::vector<Panel> panels;
};

// The SVG document (XML declaration, <svg> with xmlns, width, height, viewBox).
std::string render_svg(const Figure& figure);

// An axis from lo to hi covered by ticks at a 1, 2 or 5 times a power of ten
// step, about `target` of them: lo and hi are widened to multiples of the
// step. A range of one value is widened around it (0 gives 0..1); a
// non-finite bound gives 0..1. `integer`: a step of at least 1.
struct Ticks {
  double lo = 0, hi = 1, step = 0.2;
  std::vector<double> values;  // lo, lo + step, ..., hi
};
Ticks nice_ticks(double lo, double hi, int target = 5, bool integer = false);

// A tick's text: as many decimals as the step needs ("0.05", "1.5"); multiples
// of 1000 on a step of 1000 or more as "2k", of a million as "3M".
std::string tick_label(double value, double step);

// `text` for XML character data and attribute values: & < > " ' escaped,
// control characters that XML 1.0 forbids dropped, invalid UTF-8 replaced by
// U+FFFD, so any file name or label yields a well-formed document.
std::string escape_xml(std::string_view text);

}  // namespace ember::apps::svg
