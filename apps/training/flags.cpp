// apps/training/flags.cpp — parsing, validation and help text of Flags.
#include "apps/training/flags.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "engine/error.h"

namespace ember::apps {
namespace {

// Levenshtein distance, to suggest the flag a typo meant.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0u : 1u)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

int64_t parse_int(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  EMBER_CHECK(!text.empty() && *end == '\0' && errno == 0, "--", flag, ": '", text, "' is not an integer");
  return v;
}

double parse_double(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  EMBER_CHECK(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(v), "--", flag, ": '", text,
              "' is not a number");
  return v;
}

}  // namespace

std::vector<double> parse_number_list(const std::string& text, const char* flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    out.push_back(parse_double(flag, item));
  EMBER_CHECK(!out.empty(), "--", flag, ": '", text, "' is not a comma-separated list of numbers");
  return out;
}

Flags::Flags(std::string program, std::string summary) : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::group(const std::string& title) { current_group_ = title; }

void Flags::add_flag(const std::string& name, Kind kind, void* value, const std::string& help) {
  EMBER_CHECK(find(name) == nullptr, "flag --", name, " declared twice");
  Flag f{name, help, current_group_, kind, value, "", false};
  f.default_text = value_text(f);
  flags_.push_back(std::move(f));
}

void Flags::add(const std::string& n, int64_t* v, const std::string& h) { add_flag(n, Kind::i64, v, h); }
void Flags::add(const std::string& n, int* v, const std::string& h) { add_flag(n, Kind::i32, v, h); }
void Flags::add(const std::string& n, double* v, const std::string& h) { add_flag(n, Kind::f64, v, h); }
void Flags::add(const std::string& n, std::string* v, const std::string& h) { add_flag(n, Kind::str, v, h); }
void Flags::add(const std::string& n, bool* v, const std::string& h) { add_flag(n, Kind::boolean, v, h); }
void Flags::add(const std::string& n, std::vector<int>* v, const std::string& h) { add_flag(n, Kind::int_list, v, h); }

Flags::Flag* Flags::find(const std::string& name) {
  for (auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

bool Flags::was_set(const std::string& name) const {
  for (const auto& f : flags_)
    if (f.name == name) return f.set;
  return false;
}

void Flags::assign(Flag& f, const std::string& text) {
  switch (f.kind) {
    case Kind::i64: *static_cast<int64_t*>(f.value) = parse_int(f.name, text); break;
    case Kind::i32: {
      const int64_t v = parse_int(f.name, text);
      EMBER_CHECK(v >= INT32_MIN && v <= INT32_MAX, "--", f.name, ": ", text, " is out of range");
      *static_cast<int*>(f.value) = int(v);
      break;
    }
    case Kind::f64: *static_cast<double*>(f.value) = parse_double(f.name, text); break;
    case Kind::str: *static_cast<std::string*>(f.value) = text; break;
    case Kind::boolean:
      EMBER_CHECK(text == "0" || text == "1" || text == "true" || text == "false", "--", f.name,
                  ": expected 0 or 1, got '", text, "'");
      *static_cast<bool*>(f.value) = text == "1" || text == "true";
      break;
    case Kind::int_list: {
      std::vector<int> out;
      std::stringstream ss(text);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (item.empty()) continue;
        const int64_t v = parse_int(f.name, item);
        EMBER_CHECK(v >= INT32_MIN && v <= INT32_MAX, "--", f.name, ": ", item, " is out of range");
        out.push_back(int(v));
      }
      *static_cast<std::vector<int>*>(f.value) = out;
      break;
    }
  }
  f.set = true;
}

void Flags::positional(std::vector<std::string>* out, const std::string& usage) {
  positional_ = out;
  positional_usage_ = usage;
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (positional_ && arg == "--") {
      positional_->insert(positional_->end(), argv + i + 1, argv + argc);
      break;
    }
    if (positional_ && arg.rfind("--", 0) != 0) {
      positional_->push_back(arg);
      continue;
    }
    EMBER_CHECK(arg.rfind("--", 0) == 0 && arg.size() > 2, "unexpected argument '", arg,
                "' (flags look like --name value; see --help)");
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = find(name);
    if (!f) {
      std::string best;
      size_t best_d = 4;
      for (const auto& g : flags_)
        if (size_t d = edit_distance(name, g.name); d < best_d) best_d = d, best = g.name;
      fail(cat("unknown flag --", name, best.empty() ? std::string(" (see --help)") : " (did you mean --" + best + "?)"));
    }
    if (!has_value && f->kind == Kind::boolean) {
      const std::string next = i + 1 < argc ? argv[i + 1] : "";
      // A number after a boolean is meant as its value (so "--json 2" says 0 or 1, not "unexpected argument").
      const bool numeric = !next.empty() && next.find_first_not_of("0123456789.-+") == std::string::npos;
      const bool literal = next == "true" || next == "false" || numeric;
      value = literal ? next : "1";  // a bare boolean flag is on
      if (literal) ++i;
    } else if (!has_value) {
      EMBER_CHECK(i + 1 < argc, "--", name, " needs a value");
      value = argv[++i];
    }
    assign(*f, value);
  }
  return true;
}

std::string Flags::value_text(const Flag& f) {
  std::ostringstream os;
  switch (f.kind) {
    case Kind::i64: os << *static_cast<const int64_t*>(f.value); break;
    case Kind::i32: os << *static_cast<const int*>(f.value); break;
    case Kind::f64: os << *static_cast<const double*>(f.value); break;
    case Kind::str: os << *static_cast<const std::string*>(f.value); break;
    case Kind::boolean: os << (*static_cast<const bool*>(f.value) ? 1 : 0); break;
    case Kind::int_list: {
      const auto& v = *static_cast<const std::vector<int>*>(f.value);
      for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
      break;
    }
  }
  return os.str();
}

std::string Flags::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [--flag value ...]" << (positional_ ? " " + positional_usage_ : "") << "\n\n"
     << summary_ << "\n";
  const std::string* group = nullptr;
  constexpr size_t kHelpColumn = 34;
  for (const auto& f : flags_) {
    if (!group || f.group != *group) {
      group = &f.group;
      os << "\n" << (group->empty() ? "options" : *group) << ":\n";
    }
    const size_t head = 5 + f.name.size() + (f.default_text.empty() ? 2 : f.default_text.size());
    os << "  --" << f.name << ' ' << (f.default_text.empty() ? "\"\"" : f.default_text);
    if (head < kHelpColumn)
      os << std::string(kHelpColumn - head, ' ');
    else
      os << '\n' << std::string(kHelpColumn, ' ');
    os << f.help << "\n";
  }
  return os.str();
}

std::string Flags::settings() const {
  std::string out;
  for (const auto& f : flags_) {
    if (!out.empty()) out += ' ';
    out += f.name + "=" + value_text(f);
  }
  return out;
}

DType parse_float_dtype(const std::string& name, const char* flag) {
  if (name == "fp32" || name == "f32") return DType::f32;
  if (name == "fp16" || name == "f16") return DType::f16;
  if (name == "bf16") return DType::bf16;
  fail(cat(flag, " '", name, "': fp32 (f32), fp16 (f16) or bf16"));
}

}  // namespace ember::apps
