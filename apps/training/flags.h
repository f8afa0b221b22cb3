// apps/training/flags.h — command-line flags for the apps, MXNet style.
//
// Each flag is bound to a variable that holds its default. Accepted forms:
// `--name value` and `--name=value`; booleans take 0/1 (as MXNet's
// `--benchmark 1`) or stand alone (`--json`: 1, when the next argument is
// not 0/1/true/false); lists are comma-separated ("30,60"). A program that
// takes operands (predict's image paths) collects the arguments that are not
// flags with positional(); "--" ends the flags. `--help` prints
// every flag grouped with its default and help text. Unknown flags, missing
// or malformed values are one-line errors that name the flag.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/dtype.h"

namespace ember::apps {

class Flags {
 public:
  Flags(std::string program, std::string summary);

  void group(const std::string& title);  // starts a section of the --help text
  void add(const std::string& name, int64_t* value, const std::string& help);
  void add(const std::string& name, int* value, const std::string& help);
  void add(const std::string& name, double* value, const std::string& help);
  void add(const std::string& name, std::string* value, const std::string& help);
  void add(const std::string& name, bool* value, const std::string& help);
  void add(const std::string& name, std::vector<int>* value, const std::string& help);

  // Arguments that are not flags are appended to *out instead of being an
  // error; `usage` names them in --help ("IMAGE...").
  void positional(std::vector<std::string>* out, const std::string& usage);

  // Parses argv; returns false when --help was given (help text printed).
  bool parse(int argc, char** argv);
  bool was_set(const std::string& name) const;
  std::string help() const;
  // "name=value" for every flag, in declaration order, for the start line.
  std::string settings() const;

 private:
  enum class Kind { i64, i32, f64, str, boolean, int_list };
  struct Flag {
    std::string name, help, group;
    Kind kind;
    void* value;
    std::string default_text;
    bool set = false;
  };
  void add_flag(const std::string& name, Kind kind, void* value, const std::string& help);
  void assign(Flag& f, const std::string& text);
  static std::string value_text(const Flag& f);
  Flag* find(const std::string& name);

  std::string program_, summary_, current_group_;
  std::vector<std::string>* positional_ = nullptr;
  std::string positional_usage_;
  std::vector<Flag> flags_;
};

// "0.5,1,2e3" -> numbers, for string flags holding lists of reals; errors
// name the flag (integer lists are Flags' own int-list kind).
std::vector<double> parse_number_list(const std::string& text, const char* flag);

// A floating storage type by name, for the programs' --precision and
// kernel_lab's --dtype: fp32/f32, fp16/f16, bf16; errors name the flag.
DType parse_float_dtype(const std::string& name, const char* flag);

}  // namespace ember::apps
