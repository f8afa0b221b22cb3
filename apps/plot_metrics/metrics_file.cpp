// apps/plot_metrics/metrics_file.cpp — the metrics JSONL reader: one line at a
// time through net/json.h, values into MetricsRecord, resumed runs replacing
// what they rewrite. See metrics_file.h for the format and the rules.
#include "apps/plot_metrics/metrics_file.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "engine/error.h"
#include "engine/file_io.h"
#include "net/json.h"

namespace ember::apps {
namespace {

// The numeric keys of step and epoch records.
struct Field {
  const char* key;
  double MetricsRecord::*member;
};
constexpr Field kFields[] = {
    {"epoch", &MetricsRecord::epoch},
    {"batch", &MetricsRecord::batch},
    {"loss", &MetricsRecord::loss},
    {"train_accuracy", &MetricsRecord::train_accuracy},
    {"val_accuracy", &MetricsRecord::val_accuracy},
    {"val_top5", &MetricsRecord::val_top5},
    {"lr", &MetricsRecord::lr},
    {"momentum", &MetricsRecord::momentum},
    {"loss_scale", &MetricsRecord::loss_scale},
    {"img_per_sec", &MetricsRecord::img_per_sec},
    {"epoch_time", &MetricsRecord::epoch_time},
    {"wall_time", &MetricsRecord::wall_time},
    {"peak_rss_mb", &MetricsRecord::peak_rss_mb},
    {"data_wait_share", &MetricsRecord::data_wait_share},
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool is_nonfinite_word(std::string_view word) {
  const std::string w = lower(word);
  return w == "nan" || w == "inf" || w == "infinity";
}

// `line` with the bare NaN / Infinity / -inf tokens some writers emit
// (Python's json, printf) outside strings turned into null, which strict JSON
// has instead. Used only when the line does not parse as it is.
std::string nonfinite_tokens_to_null(std::string_view line) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < line.size();) {
    const char c = line[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < line.size()) out += line[++i];
      else if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') in_string = true;
    const size_t sign = (c == '-' || c == '+') ? 1 : 0;
    size_t end = i + sign;
    while (end < line.size() && std::isalpha(static_cast<unsigned char>(line[end]))) ++end;
    if (end > i + sign && is_nonfinite_word(line.substr(i + sign, end - i - sign))) {
      out += "null";
      i = end;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

// Where the line is, for errors: "run.jsonl:17".
struct Where {
  const std::string& path;
  size_t line;
  [[noreturn]] void fail(const std::string& what) const { ::ember::fail(cat(path, ":", line, ": ", what)); }
};

// A number, or NaN for null and the non-finite spellings; other types fail.
double number_of(const json::Value& v, const char* key, const Where& at) {
  if (v.is_null()) return kNoValue;
  if (v.is_number()) return v.as_number();
  if (v.is_string()) {
    std::string_view s = v.as_string();
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) s.remove_prefix(1);
    if (is_nonfinite_word(s)) return kNoValue;
  }
  at.fail(cat("\"", key, "\" is not a number (", json::type_name(v.type()), ")"));
}

double optional_number(const json::Value& record, const char* key, const Where& at) {
  const json::Value* v = record.find(key);
  return v ? number_of(*v, key, at) : kNoValue;
}

// The "step" of a record: an integer >= 0 (a float with an integral value counts).
int64_t step_of(const json::Value& v, const Where& at) {
  if (v.is_int() && v.as_int() >= 0) return v.as_int();
  if (v.is_number() && !v.is_int()) {
    const double d = v.as_number();
    if (d >= 0 && d < 9e15 && d == std::floor(d)) return int64_t(d);
  }
  at.fail(cat("\"step\" is not an integer >= 0 (", v.is_number() ? json::write(v) : json::type_name(v.type()), ")"));
}

enum class Kind { step, epoch, time_to_accuracy };

// Before a record of kind `k` at `step` that does not advance past the last
// record of its kind: removes what the earlier run wrote from that step on
// (its kind at >= step, the other kinds at > step; time-to-accuracy records
// without a step stay).
void replace_from(RunMetrics& run, Kind k, int64_t step) {
  const auto rewritten = [&](Kind of) {
    return [=](const auto& r) { return r.step >= 0 && (r.step > step || (of == k && r.step == step)); };
  };
  std::erase_if(run.steps, rewritten(Kind::step));
  std::erase_if(run.epochs, rewritten(Kind::epoch));
  std::erase_if(run.time_to_accuracy, rewritten(Kind::time_to_accuracy));
}

template <typename Records, typename Record>
void append(RunMetrics& run, Kind k, Records& records, const Record& record) {
  if (!records.empty() && record.step <= records.back().step) replace_from(run, k, record.step);
  records.push_back(record);
}

void read_line(RunMetrics& run, const json::Value& record, const Where& at) {
  const json::Value* kind_value = record.find("kind");
  if (!kind_value) return;  // not a record this reader knows
  if (!kind_value->is_string()) at.fail(cat("\"kind\" is not a string (", json::type_name(kind_value->type()), ")"));
  const std::string& kind = kind_value->as_string();
  if (kind == "step" || kind == "epoch") {
    const json::Value* step = record.find("step");
    if (!step) at.fail(cat(kind, " record without \"step\""));
    MetricsRecord r;
    r.step = step_of(*step, at);
    for (const Field& f : kFields) r.*f.member = optional_number(record, f.key, at);
    if (kind == "step") append(run, Kind::step, run.steps, r);
    else append(run, Kind::epoch, run.epochs, r);
  } else if (kind == "time_to_accuracy") {
    TimeToAccuracy t;
    t.target = optional_number(record, "target", at);
    t.seconds = optional_number(record, "seconds", at);
    t.epochs = optional_number(record, "epochs", at);
    if (const json::Value* step = record.find("step"); step && !step->is_null()) t.step = step_of(*step, at);
    if (t.step < 0) run.time_to_accuracy.push_back(t);
    else append(run, Kind::time_to_accuracy, run.time_to_accuracy, t);
  } else if (kind == "start") {
    const json::Value* program = record.find("program");
    const json::Value* args = record.find("args");
    run.program = program && program->is_string() ? program->as_string() : "";
    run.args = args && args->is_string() ? args->as_string() : "";
  }
  // Other kinds: written by a newer trainer, ignored.
}

}  // namespace

RunMetrics parse_metrics(std::string_view text, const std::string& path) {
  RunMetrics run;
  run.path = path;
  size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const Where at{path, line_number};
    json::Value record;
    try {
      record = json::parse(line);
    } catch (const Error& first) {
      try {
        record = json::parse(nonfinite_tokens_to_null(line));
      } catch (const Error&) {
        at.fail(cat("not valid JSON (", first.what(), ")"));
      }
    }
    if (!record.is_object()) at.fail(cat("not a JSON object (", json::type_name(record.type()), ")"));
    read_line(run, record, at);
  }
  if (run.steps.empty() && run.epochs.empty()) fail(cat(path, ": no step or epoch records (not a metrics file?)"));
  return run;
}

RunMetrics read_metrics_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  return parse_metrics(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace ember::apps
