// tests/apps/test_plot_metrics.cpp — plot_metrics: the metrics JSONL reader
// (apps/plot_metrics/metrics_file.h: series, resumed runs, file:line errors), the
// SVG writer's nice ticks and XML escaping (apps/plot_metrics/svg_plot.h), and the
// built build/plot_metrics end to end: its SVG rendered by rsvg-convert
// (Debian's librsvg2-bin, which `make deps` installs) to a PNG whose size and
// colours are checked.
#include <doctest/doctest.h>
#include <stb/stb_image.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "apps/plot_metrics/metrics_file.h"
#include "apps/plot_metrics/svg_plot.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using apps::MetricsRecord;
using apps::RunMetrics;
using ember::testing::contains;
using ember::testing::TempDir;
using namespace ember::testing::process;

void write_text(const std::string& path, const std::string& text) {
  ember::testing::write_bytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

std::vector<int64_t> steps_of(const std::vector<MetricsRecord>& records) {
  std::vector<int64_t> out;
  for (const auto& r : records) out.push_back(r.step);
  return out;
}

std::string step_line(int64_t step, double loss) {
  return cat(R"({"kind":"step","step":)", step, R"(,"epoch":0,"batch":)", step, R"(,"loss":)", loss,
             R"(,"train_accuracy":0.5,"lr":0.1,"img_per_sec":600,"wall_time":1})", "\n");
}
std::string epoch_line(int64_t step, double val) {
  return cat(R"({"kind":"epoch","step":)", step, R"(,"epoch":0,"loss":0.5,"val_accuracy":)", val, "}\n");
}

TEST_CASE("plot_metrics: a metrics file reads into step, epoch and time-to-accuracy series") {
  TempDir dir;
  const std::string path = dir.file("run.jsonl");
  write_text(path,
             R"({"kind":"start","wall_time":0,"program":"train_resnet","args":"--num-layers 20","seed":0})"
             "\n"
             R"({"kind":"step","step":50,"epoch":0,"batch":50,"loss":1.95,"train_accuracy":0.35,"lr":0.0088,"momentum":0.95,"loss_scale":1,"img_per_sec":632.9,"wall_time":10.1,"new_key":[1,{"x":2}]})"
             "\n\n"  // an empty line is skipped
             R"({"kind":"step","step":100,"loss":null,"lr":0.01,"img_per_sec":NaN})"
             "\r\n"  // null and a bare NaN read as NaN; CRLF is fine
             R"({"kind":"gpu_stats","step":120,"util":0.9})"
             "\n"  // an unknown kind is ignored
             R"({"kind":"epoch","step":468,"epoch":0,"loss":0.61,"train_accuracy":0.81,"val_accuracy":0.86,"lr":0.19,"img_per_sec":640.2,"epoch_time":93.7,"wall_time":95.2,"peak_rss_mb":380.5,"data_wait_share":0.01})"
             "\n"
             R"({"kind":"time_to_accuracy","target":0.93,"seconds":812.5,"epochs":8,"step":3744,"wall_time":812.5})");
  const RunMetrics run = apps::read_metrics_file(path);
  CHECK(run.path == path);
  CHECK(run.program == "train_resnet");
  CHECK(run.args == "--num-layers 20");
  REQUIRE(steps_of(run.steps) == std::vector<int64_t>{50, 100});
  const MetricsRecord& s = run.steps[0];
  CHECK(s.epoch == 0);
  CHECK(s.batch == 50);
  CHECK(s.loss == doctest::Approx(1.95));
  CHECK(s.train_accuracy == doctest::Approx(0.35));
  CHECK(s.lr == doctest::Approx(0.0088));
  CHECK(s.momentum == doctest::Approx(0.95));
  CHECK(s.loss_scale == 1);
  CHECK(s.img_per_sec == doctest::Approx(632.9));
  CHECK(std::isnan(s.val_accuracy));  // not in step records
  CHECK(std::isnan(run.steps[1].loss));
  CHECK(std::isnan(run.steps[1].img_per_sec));
  CHECK(std::isnan(run.steps[1].momentum));  // absent
  CHECK(run.steps[1].lr == doctest::Approx(0.01));
  REQUIRE(steps_of(run.epochs) == std::vector<int64_t>{468});
  const MetricsRecord& e = run.epochs[0];
  CHECK(e.val_accuracy == doctest::Approx(0.86));
  CHECK(std::isnan(e.val_top5));  // absent
  CHECK(e.epoch_time == doctest::Approx(93.7));
  CHECK(e.peak_rss_mb == doctest::Approx(380.5));
  CHECK(e.data_wait_share == doctest::Approx(0.01));
  REQUIRE(run.time_to_accuracy.size() == 1);
  CHECK(run.time_to_accuracy[0].target == doctest::Approx(0.93));
  CHECK(run.time_to_accuracy[0].seconds == doctest::Approx(812.5));
  CHECK(run.time_to_accuracy[0].step == 3744);
}

TEST_CASE("plot_metrics: a resumed run replaces what the earlier run wrote from its first step on") {
  SUBCASE("resumed from an earlier checkpoint") {
    // The first run: steps 50..300, epochs at 150 and 300; it reached its target at 280.
    std::string text;
    for (int s = 50; s <= 300; s += 50) {
      text += step_line(s, 1.0);
      if (s % 150 == 0) text += epoch_line(s, 0.5);
    }
    text += R"({"kind":"time_to_accuracy","target":0.5,"seconds":9,"step":280})" "\n";
    // Resumed from the checkpoint at step 150: steps 200 and 250 again, then the epoch at 300.
    text += R"({"kind":"start","program":"train_resnet","args":"--resume"})" "\n";
    text += step_line(200, 2.0) + step_line(250, 2.5) + epoch_line(300, 0.7);
    const RunMetrics run = apps::parse_metrics(text, "run.jsonl");
    CHECK(steps_of(run.steps) == std::vector<int64_t>{50, 100, 150, 200, 250});
    CHECK(run.steps[2].loss == 1.0);  // before the resume point: the first run's
    CHECK(run.steps[3].loss == 2.0);  // from it on: the resumed run's
    CHECK(run.steps[4].loss == 2.5);
    CHECK(steps_of(run.epochs) == std::vector<int64_t>{150, 300});
    CHECK(run.epochs[1].val_accuracy == 0.7);
    CHECK(run.time_to_accuracy.empty());  // the first run's, at 280, is gone
    CHECK(run.args == "--resume");
  }
  SUBCASE("restarted from scratch into the same file") {
    const std::string text = step_line(50, 1.0) + step_line(100, 1.0) + epoch_line(100, 0.5) + step_line(150, 1.0) +
                             step_line(50, 3.0) + step_line(100, 3.0);
    const RunMetrics run = apps::parse_metrics(text, "run.jsonl");
    CHECK(steps_of(run.steps) == std::vector<int64_t>{50, 100});
    CHECK(run.steps[0].loss == 3.0);
    CHECK(run.steps[1].loss == 3.0);
    CHECK(run.epochs.empty());
  }
  SUBCASE("an epoch record at the step of the step record before it is no resume") {
    const std::string text = step_line(50, 1.0) + step_line(100, 1.0) + epoch_line(100, 0.5) + step_line(150, 1.0) +
                             epoch_line(150, 0.6);
    const RunMetrics run = apps::parse_metrics(text, "run.jsonl");
    CHECK(steps_of(run.steps) == std::vector<int64_t>{50, 100, 150});
    CHECK(steps_of(run.epochs) == std::vector<int64_t>{100, 150});
  }
  SUBCASE("a repeated epoch record replaces the earlier one and the step records after it") {
    const std::string text = step_line(100, 1.0) + epoch_line(100, 0.5) + step_line(150, 1.0) + epoch_line(100, 0.9);
    const RunMetrics run = apps::parse_metrics(text, "run.jsonl");
    CHECK(steps_of(run.steps) == std::vector<int64_t>{100});
    REQUIRE(steps_of(run.epochs) == std::vector<int64_t>{100});
    CHECK(run.epochs[0].val_accuracy == 0.9);
  }
}

TEST_CASE("plot_metrics: bad lines are one-line errors naming the file and the line") {
  const std::string ok = step_line(50, 1.0);
  CHECK_ERROR_HAS(apps::parse_metrics(ok + ok.substr(0, 20) + "\n", "run.jsonl"), "run.jsonl:2: not valid JSON");
  CHECK_ERROR_HAS(apps::parse_metrics(ok + "\n[1,2]\n", "run.jsonl"), "run.jsonl:3: not a JSON object");
  CHECK_ERROR_HAS(apps::parse_metrics(ok + R"({"kind":"step","step":100,"loss":"low"})", "r.jsonl"),
                  R"(r.jsonl:2: "loss" is not a number (string))");
  CHECK_ERROR_HAS(apps::parse_metrics(R"({"kind":"epoch","val_accuracy":0.9})", "r.jsonl"),
                  R"(r.jsonl:1: epoch record without "step")");
  CHECK_ERROR_HAS(apps::parse_metrics(R"({"kind":"step","step":1.5})", "r.jsonl"),
                  R"(r.jsonl:1: "step" is not an integer >= 0 (1.5))");
  CHECK_ERROR_HAS(apps::parse_metrics(R"({"kind":"step","step":-2})", "r.jsonl"), R"(r.jsonl:1: "step" is not an)");
  CHECK_ERROR_HAS(apps::parse_metrics(R"({"kind":7})", "r.jsonl"), R"(r.jsonl:1: "kind" is not a string)");
  // A file without step or epoch records is an error naming it.
  CHECK_ERROR_HAS(apps::parse_metrics(R"({"kind":"start","program":"train_resnet"})" "\n", "empty.jsonl"),
                  "empty.jsonl: no step or epoch records");
  CHECK_ERROR_HAS(apps::parse_metrics("", "empty.jsonl"), "empty.jsonl: no step or epoch records");
  CHECK_ERROR_HAS(apps::read_metrics_file("/nonexistent/run.jsonl"), "/nonexistent/run.jsonl");
}

TEST_CASE("plot_metrics: nice ticks step by 1, 2 or 5 times a power of ten and cover the range") {
  const auto values = [](double lo, double hi) { return apps::svg::nice_ticks(lo, hi).values; };
  const auto near = [](const std::vector<double>& got, const std::vector<double>& want) {
    std::string text;
    for (double v : got) text += cat(v, " ");
    INFO("got ", text);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-12));
  };
  near(values(0, 1), {0, 0.2, 0.4, 0.6, 0.8, 1});
  near(values(0.013, 0.97), {0, 0.2, 0.4, 0.6, 0.8, 1});
  near(values(0, 4680), {0, 1000, 2000, 3000, 4000, 5000});
  near(values(0.0088, 0.19), {0, 0.05, 0.1, 0.15, 0.2});
  near(values(632, 641), {632, 634, 636, 638, 640, 642});
  near(values(-3, 7), {-4, -2, 0, 2, 4, 6, 8});
  near(values(0.85, 0.95), {0.84, 0.86, 0.88, 0.9, 0.92, 0.94, 0.96});
  near(values(0, 0), {0, 0.2, 0.4, 0.6, 0.8, 1});  // one value: widened
  near(values(NAN, 1), {0, 0.2, 0.4, 0.6, 0.8, 1});
  const apps::svg::Ticks t = apps::svg::nice_ticks(5, 5);
  CHECK(t.lo < 5);
  CHECK(t.hi > 5);
  CHECK(t.values.size() >= 3);
  CHECK(apps::svg::nice_ticks(0, 0.3).values[1] == 0.1);  // exactly the double nearest 0.1, not 0.1 + 1 ulp
  CHECK(apps::svg::nice_ticks(0, 0.3).values[3] == 0.3);
  near(apps::svg::nice_ticks(0, 1, 5, true).values, {0, 1});  // integer axis (steps): no 0.2
  near(apps::svg::nice_ticks(0, 3, 5, true).values, {0, 1, 2, 3});
  near(apps::svg::nice_ticks(0, 4680, 5, true).values, {0, 1000, 2000, 3000, 4000, 5000});

  CHECK(apps::svg::tick_label(0.6, 0.2) == "0.6");
  CHECK(apps::svg::tick_label(0.05, 0.05) == "0.05");
  CHECK(apps::svg::tick_label(0, 0.05) == "0.00");
  CHECK(apps::svg::tick_label(1500, 500) == "1500");
  CHECK(apps::svg::tick_label(2000, 1000) == "2k");
  CHECK(apps::svg::tick_label(3e6, 1e6) == "3M");
  CHECK(apps::svg::tick_label(-4, 2) == "-4");
  CHECK(apps::svg::tick_label(-1e-17, 0.2) == "0.0");  // no "-0.0"
}

TEST_CASE("plot_metrics: text is escaped for XML") {
  using apps::svg::escape_xml;
  CHECK(escape_xml(R"(a<b & "c" 'd'>)") == "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  CHECK(escape_xml("caf\xC3\xA9 \xE2\x86\x92 ok") == "caf\xC3\xA9 \xE2\x86\x92 ok");  // valid UTF-8 stays
  CHECK(escape_xml(std::string("a\x01" "b\x1F" "c\td", 7)) == "abc\td");             // controls XML forbids: dropped
  CHECK(escape_xml("bad\xFF\xC3(") == "bad\xEF\xBF\xBD\xEF\xBF\xBD(");               // invalid UTF-8: U+FFFD
  CHECK(escape_xml("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");       // a UTF-16 surrogate
}

// ------------------------------------------------------------ the program

std::string plot_program() {
  const std::string path = binary_dir() + "/plot_metrics";
  REQUIRE_MESSAGE(::access(path.c_str(), X_OK) == 0, path << " is missing: build it with `make all`");
  return path;
}

struct Run {
  int code = 0;
  std::string out, err;
};
Run run_program(const std::vector<std::string>& argv, const TempDir& dir) {
  static int n = 0;
  Process p("proc" + std::to_string(n++), argv, {}, dir.path.string());
  REQUIRE_MESSAGE(p.wait_for(60), argv[0] << " did not finish in 60 s: " << p.describe());
  return {p.exit_code(), p.out(), p.err()};
}

// A plausible run: loss falling, accuracy rising, a warm-up then decaying
// learning rate, momentum, throughput; one NaN loss (a gap in the line).
std::string synthetic_run(double speed, double val_offset) {
  std::string text = R"({"kind":"start","wall_time":0,"program":"train_resnet","args":"--num-layers 20 <&>"})" "\n";
  const int per_epoch = 468, epochs = 8;
  for (int ep = 0; ep < epochs; ++ep) {
    for (int b = 50; b <= per_epoch; b += 50) {
      const int s = ep * per_epoch + b;
      const double loss = 2.3 * std::exp(-s / 700.0) + 0.2 + 0.03 * std::sin(s * 0.37);
      const double lr = 0.2 * std::min(1.0, s / 900.0) * (1.0 - double(s) / (per_epoch * epochs + 1));
      text += cat(R"({"kind":"step","step":)", s, R"(,"epoch":)", ep, R"(,"batch":)", b, R"(,"loss":)",
                  s == 1450 ? std::string("NaN") : cat(loss), R"(,"train_accuracy":)", 1 - loss / 2.6, R"(,"lr":)", lr,
                  R"(,"momentum":)", 0.95 - 0.1 * std::min(1.0, s / 900.0), R"(,"img_per_sec":)",
                  speed + 10 * std::sin(s * 0.1), "}\n");
    }
    text += cat(R"({"kind":"epoch","step":)", (ep + 1) * per_epoch, R"(,"epoch":)", ep, R"(,"val_accuracy":)",
                0.8 + 0.017 * ep + val_offset, "}\n");
  }
  text += R"({"kind":"time_to_accuracy","target":0.9,"seconds":812.5,"epochs":7,"step":3276})" "\n";
  return text;
}

// Width and height from a PNG's IHDR chunk (big-endian at bytes 16 and 20).
std::pair<uint32_t, uint32_t> png_size(const std::vector<uint8_t>& png) {
  REQUIRE(png.size() > 24);
  REQUIRE(std::string(png.begin() + 1, png.begin() + 4) == "PNG");
  REQUIRE(std::string(png.begin() + 12, png.begin() + 16) == "IHDR");
  const auto be32 = [&](size_t at) {
    return uint32_t(png[at]) << 24 | uint32_t(png[at + 1]) << 16 | uint32_t(png[at + 2]) << 8 | uint32_t(png[at + 3]);
  };
  return {be32(16), be32(20)};
}

TEST_CASE("plot_metrics: the program draws both runs into an SVG that rsvg-convert renders") {
  const std::string rsvg = find_program("rsvg-convert");
  REQUIRE_MESSAGE(!rsvg.empty(),
                  "rsvg-convert is not installed: `make deps` installs librsvg2-bin (this test renders the SVG with it)");
  TempDir dir;
  write_text(dir.file("fast.jsonl"), synthetic_run(900, 0.0));
  write_text(dir.file("slow.jsonl"), synthetic_run(500, -0.02));
  const std::string svg_path = dir.file("plot.svg"), png_path = dir.file("plot.png");
  const Run r = run_program({plot_program(), dir.file("fast.jsonl"), dir.file("slow.jsonl"), "-o", svg_path, "--title",
                             "A & B <compare>", "--label", "fast \"run\"", "--label", "slow"},
                            dir);
  REQUIRE_MESSAGE(r.code == 0, "plot_metrics failed: " << r.err);
  CHECK(contains(r.out, "wrote " + svg_path));
  const std::string svg = read_text(svg_path);
  CHECK(contains(svg, "xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(contains(svg, "width=\"1200\" height=\"800\" viewBox=\"0 0 1200 800\""));
  CHECK(contains(svg, "A &amp; B &lt;compare&gt;"));
  CHECK(contains(svg, "fast &quot;run&quot;"));
  CHECK(!contains(svg, "<compare>"));
  CHECK(contains(svg, "stroke-dasharray"));  // the target and momentum lines
  for (const char* title : {"Training loss", "Accuracy", "Learning rate and momentum", "Throughput", "images / s"})
    CHECK_MESSAGE(contains(svg, title), title);

  const Run render = run_program({rsvg, svg_path, "-o", png_path}, dir);
  REQUIRE_MESSAGE(render.code == 0, "rsvg-convert rejected the SVG: " << render.err);
  const std::vector<uint8_t> png = read_file(png_path);
  const auto [w, h] = png_size(png);
  CHECK(w == 1200);
  CHECK(h == 800);

  int pw = 0, ph = 0, channels = 0;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(png.data(), int(png.size()), &pw, &ph, &channels, 3), stbi_image_free);
  REQUIRE(pixels);
  REQUIRE(pw == 1200);
  // Pixels near each run's colour (#1f77b4 blue, #ff7f0e orange), and how much is not white.
  const auto near = [](const stbi_uc* p, int r, int g, int b) {
    return std::abs(p[0] - r) + std::abs(p[1] - g) + std::abs(p[2] - b) < 40;
  };
  size_t blue = 0, orange = 0, ink = 0;
  std::vector<bool> seen(1 << 15);
  for (size_t i = 0; i < size_t(pw) * size_t(ph); ++i) {
    const stbi_uc* p = pixels.get() + 3 * i;
    blue += near(p, 0x1f, 0x77, 0xb4);
    orange += near(p, 0xff, 0x7f, 0x0e);
    ink += !near(p, 255, 255, 255);
    seen[(p[0] >> 3) << 10 | (p[1] >> 3) << 5 | (p[2] >> 3)] = true;
  }
  const size_t distinct = size_t(std::count(seen.begin(), seen.end(), true));
  INFO("blue ", blue, ", orange ", orange, ", non-white ", ink, ", distinct colours ", distinct);
  CHECK(blue > 500);  // lines in four panels, markers, a legend swatch (orange is drawn over it)
  CHECK(orange > 500);
  CHECK(ink > size_t(pw) * size_t(ph) / 50);
  CHECK(distinct > 20);
}

TEST_CASE("plot_metrics: the program's errors name the file and line; --help prints the usage") {
  TempDir dir;
  write_text(dir.file("good.jsonl"), step_line(50, 1.0));
  write_text(dir.file("bad.jsonl"), step_line(50, 1.0) + "\"just a string\"\n");
  const std::string svg = dir.file("out.svg");
  Run r = run_program({plot_program(), dir.file("good.jsonl"), dir.file("bad.jsonl"), "-o", svg}, dir);
  CHECK(r.code == 1);
  CHECK(r.err == "plot_metrics: " + dir.file("bad.jsonl") + ":2: not a JSON object (string)\n");
  CHECK(::access(svg.c_str(), F_OK) != 0);  // nothing written

  r = run_program({plot_program(), dir.file("good.jsonl"), "-o", svg, "--label", "a", "--label", "b"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "--label given 2 times for 1 files"));
  r = run_program({plot_program(), dir.file("good.jsonl")}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "-o OUT.svg is required"));
  r = run_program({plot_program(), dir.file("good.jsonl"), "-o", svg, "--colour", "red"}, dir);
  CHECK(r.code == 1);
  CHECK(contains(r.err, "unknown option '--colour'"));

  r = run_program({plot_program(), "--help"}, dir);
  CHECK(r.code == 0);
  CHECK(contains(r.out, "usage: plot_metrics RUN.jsonl"));
  CHECK(contains(r.out, "--label NAME"));

  r = run_program({plot_program(), dir.file("good.jsonl"), "-o", svg}, dir);
  CHECK(r.code == 0);
  CHECK(contains(read_text(svg), "</svg>"));
}

}  // namespace
