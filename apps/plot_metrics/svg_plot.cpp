// apps/plot_metrics/svg_plot.cpp — the SVG line-chart writer: nice ticks, XML
// escaping, the figure layout (title, legend, grid of panels) and each
// panel's axes and lines. See svg_plot.h for the contract.
#include "apps/plot_metrics/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace ember::apps::svg {
namespace {

// Coordinates and sizes in SVG text: one decimal is finer than a pixel; a
// point far off the panel (an axis that could not cover 1e308) stays short.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", std::clamp(v, -1e6, 1e6));
  return buf;
}

double pow10i(int e) {
  double p = 1;
  for (int i = 0; i < e; ++i) p *= 10;
  return p;
}

// i * f * 10^e with one rounding, so 3 * 0.2 is 0.6, not 0.6000000000000001.
double scaled(double i_times_f, int e) { return e >= 0 ? i_times_f * pow10i(e) : i_times_f / pow10i(-e); }

// Rough width of text in pixels (a sans-serif glyph is ~0.6 em on average).
double text_width(std::string_view s, double font_size) {
  size_t glyphs = 0;
  for (unsigned char c : s) glyphs += (c & 0xC0) != 0x80;
  return double(glyphs) * font_size * 0.6;
}

std::string text(double x, double y, std::string_view s, double size, const char* anchor = "start",
                 const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) + "\" text-anchor=\"" + anchor +
         "\"" + extra + ">" + escape_xml(s) + "</text>\n";
}

std::string line_element(double x1, double y1, double x2, double y2, const std::string& style) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) + "\" " + style +
         "/>\n";
}

std::string circle(double x, double y, double r, const std::string& fill, const std::string& extra = "") {
  return "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(r) + "\" fill=\"" + escape_xml(fill) + "\"" +
         extra + "/>\n";
}

std::string stroke_style(const std::string& color, double width, bool dashed, double opacity = 1.0) {
  std::string s = "stroke=\"" + escape_xml(color) + "\" stroke-width=\"" + num(width) + "\"";
  if (dashed) s += " stroke-dasharray=\"6,4\"";
  if (opacity < 1.0) s += " stroke-opacity=\"" + num(opacity) + "\"";
  return s;
}

struct Box {
  double left, top, right, bottom;
};

// Data to pixel coordinates on one pair of axes.
struct Scale {
  Ticks x, y;
  Box box;
  double px(double v) const { return box.left + (v - x.lo) / (x.hi - x.lo) * (box.right - box.left); }
  double py(double v) const { return box.bottom - (v - y.lo) / (y.hi - y.lo) * (box.bottom - box.top); }
};

struct Range {
  double lo = INFINITY, hi = -INFINITY;
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

// The runs of consecutive finite points of `line`, in pixels.
std::vector<std::vector<Point>> segments(const Line& line, const Scale& s) {
  std::vector<std::vector<Point>> out(1);
  for (const Point& p : line.points) {
    if (std::isfinite(p.x) && std::isfinite(p.y)) {
      out.back().push_back({s.px(p.x), s.py(p.y)});
    } else if (!out.back().empty()) {
      out.emplace_back();
    }
  }
  if (out.back().empty()) out.pop_back();
  return out;
}

// Keeps the first, lowest, highest and last point of each pixel column when
// a segment has many more points than the plot has columns.
std::vector<Point> thin(const std::vector<Point>& seg, double columns) {
  if (double(seg.size()) <= 4 * columns) return seg;
  std::vector<Point> out;
  for (size_t i = 0; i < seg.size();) {
    const double col = std::floor(seg[i].x);
    size_t j = i, lo = i, hi = i;
    for (; j < seg.size() && std::floor(seg[j].x) == col; ++j) {
      if (seg[j].y < seg[lo].y) lo = j;
      if (seg[j].y > seg[hi].y) hi = j;
    }
    size_t keep[4] = {i, lo, hi, j - 1};
    std::sort(keep, keep + 4);
    for (int k = 0; k < 4; ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(seg[keep[k]]);
    i = j;
  }
  return out;
}

std::string draw_line(const Line& line, const Scale& s) {
  std::string out;
  std::string path;
  const auto segs = segments(line, s);
  for (const auto& seg : segs) {
    const auto pts = thin(seg, s.box.right - s.box.left);
    for (size_t i = 0; i < pts.size(); ++i)
      path += (i ? " L" : path.empty() ? "M" : " M") + num(pts[i].x) + "," + num(pts[i].y);
    if (seg.size() == 1 && !line.markers)  // a lone point between gaps: a dot, or it would not show
      out += circle(seg[0].x, seg[0].y, line.width + 0.5, line.color);
  }
  if (!path.empty())
    out = "<path d=\"" + path + "\" fill=\"none\" stroke-linejoin=\"round\" " +
          stroke_style(line.color, line.width, line.dashed, line.opacity) + "/>\n" + out;
  if (line.markers)
    for (const auto& seg : segs)
      for (const Point& p : seg)
        out += circle(p.x, p.y, 3, line.color, " stroke=\"#ffffff\" stroke-width=\"0.8\"");
  return out;
}

// A short sample of a line style followed by its label; returns the width used.
double draw_key_entry(std::string& out, double x, double y, const KeyEntry& k) {
  const char* grey = "#555555";
  out += line_element(x, y - 4, x + 22, y - 4, stroke_style(grey, k.width, k.dashed));
  if (k.markers) out += circle(x + 11, y - 4, 3, grey);
  out += text(x + 27, y, k.label, 11, "start", " fill=\"#555555\"");
  return 27 + text_width(k.label, 11) + 16;
}

std::string draw_panel(const Panel& p, const Box& cell, int index) {
  Range xr, yr, y2r;
  bool has_right = false;
  for (const Line& l : p.lines) {
    has_right = has_right || l.right_axis;
    for (const Point& pt : l.points) {
      if (!std::isfinite(pt.x) || !std::isfinite(pt.y)) continue;
      xr.add(pt.x);
      (l.right_axis ? y2r : yr).add(pt.y);
    }
  }
  const bool has_data = !xr.empty();
  for (const ReferenceLine& r : p.references) yr.add(r.y);
  if (p.x_from_zero) xr.add(0);
  if (p.y_from_zero) yr.add(0);
  const auto ticks_of = [](const Range& r, bool integer) {
    return r.empty() ? nice_ticks(0, 1, 5, integer) : nice_ticks(r.lo, r.hi, 5, integer);
  };
  const Box box{cell.left + 74, cell.top + 44, cell.right - (has_right ? 66 : 26), cell.bottom - 46};
  const Scale s{ticks_of(xr, p.x_integer), ticks_of(yr, false), box};
  const Scale s2{s.x, ticks_of(y2r, false), box};

  std::string out = "<g>\n";
  const double mid_x = (box.left + box.right) / 2, mid_y = (box.top + box.bottom) / 2;
  out += text(mid_x, cell.top + 18, p.title, 14, "middle", " font-weight=\"bold\"");
  double kx = box.left;
  for (const KeyEntry& k : p.key) kx += draw_key_entry(out, kx, cell.top + 36, k);

  // Grid, ticks and tick labels.
  const std::string grid = stroke_style("#e6e6e6", 1, false), tick = stroke_style("#666666", 1, false);
  for (double v : s.x.values) {
    const double x = s.px(v);
    out += line_element(x, box.top, x, box.bottom, grid) + line_element(x, box.bottom, x, box.bottom + 4, tick);
    out += text(x, box.bottom + 17, tick_label(v, s.x.step), 11, "middle");
  }
  for (double v : s.y.values) {
    const double y = s.py(v);
    out += line_element(box.left, y, box.right, y, grid) + line_element(box.left - 4, y, box.left, y, tick);
    out += text(box.left - 7, y + 4, tick_label(v, s.y.step), 11, "end");
  }
  if (has_right)
    for (double v : s2.y.values) {
      const double y = s2.py(v);
      out += line_element(box.right, y, box.right + 4, y, tick);
      out += text(box.right + 7, y + 4, tick_label(v, s2.y.step), 11, "start");
    }
  out += "<rect x=\"" + num(box.left) + "\" y=\"" + num(box.top) + "\" width=\"" + num(box.right - box.left) +
         "\" height=\"" + num(box.bottom - box.top) + "\" fill=\"none\" " + tick + "/>\n";

  // Axis titles.
  out += text(mid_x, box.bottom + 36, p.x_title, 12, "middle");
  out += text(cell.left + 16, mid_y, p.y_title, 12, "middle",
              " transform=\"rotate(-90 " + num(cell.left + 16) + " " + num(mid_y) + ")\"");
  if (has_right)
    out += text(cell.right - 12, mid_y, p.y2_title, 12, "middle",
                " transform=\"rotate(90 " + num(cell.right - 12) + " " + num(mid_y) + ")\"");

  // The data, clipped to the plot area.
  const std::string clip = "plot-area-" + std::to_string(index);
  out += "<clipPath id=\"" + clip + "\"><rect x=\"" + num(box.left - 4) + "\" y=\"" + num(box.top - 4) +
         "\" width=\"" + num(box.right - box.left + 8) + "\" height=\"" + num(box.bottom - box.top + 8) +
         "\"/></clipPath>\n<g clip-path=\"url(#" + clip + ")\">\n";
  double label_y = INFINITY;
  for (const ReferenceLine& r : p.references) {
    if (!std::isfinite(r.y)) continue;
    const double y = s.py(r.y);
    out += line_element(box.left, y, box.right, y, stroke_style(r.color, 1.2, true));
    label_y = std::min(label_y - 13, y - 4);  // stacked upwards when several are close
    out += text(box.left + 6, std::max(label_y, box.top + 12), r.label, 11, "start",
                " fill=\"" + escape_xml(r.color) + "\"");
  }
  for (const Line& l : p.lines) out += draw_line(l, l.right_axis ? s2 : s);
  out += "</g>\n";
  if (!has_data) out += text(mid_x, mid_y, "no data", 14, "middle", " fill=\"#999999\"");
  return out + "</g>\n";
}

}  // namespace

Ticks nice_ticks(double lo, double hi, int target, bool integer) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi - lo <= 1e-12 * std::max(std::fabs(lo), std::fabs(hi))) {
    const double pad = lo == 0 ? 0.0 : std::fabs(lo) * 0.1;
    if (pad == 0) lo = 0, hi = 1;
    else lo -= pad, hi += pad;
  }
  target = std::max(target, 1);
  const double raw = (hi - lo) / target;
  if (!std::isfinite(raw) || raw < 1e-290 || raw > 1e290) return nice_ticks(0, 1, target, integer);  // no sane axis
  int e = int(std::floor(std::log10(raw)));
  const double f = raw / std::pow(10.0, e);
  double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
  if (nice == 10) nice = 1, ++e;
  if (integer && e < 0) nice = 1, e = 0;
  Ticks t;
  t.step = scaled(nice, e);
  const double first = std::floor(lo / t.step + 1e-9), last = std::ceil(hi / t.step - 1e-9);
  if (std::fabs(first) > 1e15 || std::fabs(last) > 1e15)  // a tiny step on huge values: no ticks between the ends
    return Ticks{lo, hi, hi - lo, {lo, hi}};
  for (double i = first; i <= last; ++i) t.values.push_back(scaled(i * nice, e) + 0.0);  // + 0.0: no -0
  t.lo = t.values.front();
  t.hi = t.values.back();
  return t;
}

std::string tick_label(double value, double step) {
  if (std::fabs(value) < step * 1e-6) value = 0;
  const char* suffix = "";
  if (step >= 1e6 && std::fmod(std::fabs(value), 1e6) == 0 && value != 0) value /= 1e6, step /= 1e6, suffix = "M";
  else if (step >= 1e3 && std::fmod(std::fabs(value), 1e3) == 0 && value != 0) value /= 1e3, step /= 1e3, suffix = "k";
  const int decimals = step >= 1 ? 0 : std::min(12, int(std::ceil(-std::log10(step) - 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", decimals, value, suffix);
  return buf;
}

std::string escape_xml(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default:
          if (c >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += char(c);  // XML 1.0 forbids the other controls
      }
      ++i;
      continue;
    }
    // A multi-byte UTF-8 sequence: kept when valid and allowed in XML.
    const size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    uint32_t cp = c & (n == 2 ? 0x1F : n == 3 ? 0x0F : 0x07);
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      ok = (b & 0xC0) == 0x80;
      cp = (cp << 6) | (b & 0x3F);
    }
    ok = ok && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) &&
         !(cp >= 0xD800 && cp <= 0xDFFF) && cp != 0xFFFE && cp != 0xFFFF;
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for the bad byte
      ++i;
    }
  }
  return out;
}

std::string render_svg(const Figure& f) {
  const double w = f.width, h = f.height;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n";
  out += "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"" + std::to_string(f.width) +
         "\" height=\"" + std::to_string(f.height) + "\" viewBox=\"0 0 " + std::to_string(f.width) + " " +
         std::to_string(f.height) + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  out += "<title>" + escape_xml(f.title) + "</title>\n";
  out += "<rect x=\"0\" y=\"0\" width=\"" + num(w) + "\" height=\"" + num(h) + "\" fill=\"#ffffff\"/>\n";
  out += text(w / 2, 26, f.title, 18, "middle", " font-weight=\"bold\"");
  if (!f.subtitle.empty()) out += text(w / 2, 44, f.subtitle, 11, "middle", " fill=\"#666666\"");

  // The legend: one row of swatches, centred (wrapping when it is too long).
  double x = 0;
  std::vector<std::pair<double, const LegendEntry*>> row;
  std::string legend;
  double legend_y = f.subtitle.empty() ? 56 : 64;
  const auto flush = [&] {
    const double shift = (w - x) / 2;
    for (const auto& [ex, e] : row) {
      legend += "<rect x=\"" + num(ex + shift) + "\" y=\"" + num(legend_y - 9) +
                "\" width=\"18\" height=\"4\" fill=\"" + escape_xml(e->color) + "\"/>\n";
      legend += text(ex + shift + 24, legend_y - 3, e->label, 12);
    }
    row.clear();
    x = 0;
  };
  for (const LegendEntry& e : f.legend) {
    const double ew = 24 + text_width(e.label, 12) + 24;
    if (!row.empty() && x + ew > w - 40) flush(), legend_y += 18;
    row.push_back({x, &e});
    x += ew;
  }
  if (!row.empty()) flush();
  out += legend;

  // The panels, in a grid below.
  const int columns = std::max(1, f.columns);
  const int rows = std::max(1, int((f.panels.size() + size_t(columns) - 1) / size_t(columns)));
  const double top = legend_y + 6, cell_w = w / columns, cell_h = (h - top) / rows;
  for (size_t i = 0; i < f.panels.size(); ++i) {
    const double cx = double(i % size_t(columns)) * cell_w, cy = top + double(i / size_t(columns)) * cell_h;
    out += draw_panel(f.panels[i], Box{cx, cy, cx + cell_w, cy + cell_h}, int(i));
  }
  return out + "</svg>\n";
}

}  // namespace ember::apps::svg
