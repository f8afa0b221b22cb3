// apps/training/training_checkpoint.cpp — writing, finding and pruning the
// checkpoints of a training run.
#include "apps/training/training_checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "net/checkpoint.h"
#include "net/json.h"
#include "net/safetensors.h"

namespace ember::apps {
namespace {

namespace fs = std::filesystem;

const char kModelSuffix[] = ".safetensors";
const char kStatesSuffix[] = ".states.safetensors";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A checkpoint of the prefix found by its file name.
struct Candidate {
  int epoch = 0;
  int64_t batch = 0;
  std::string model_path, states_path;
};

// The checkpoints whose states file is in the prefix's directory, oldest first.
std::vector<Candidate> candidates(const std::string& prefix) {
  const fs::path p(prefix);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string base = p.filename().string() + "-";
  std::vector<Candidate> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(base, 0) != 0 || !ends_with(name, kStatesSuffix)) continue;
    const std::string middle = name.substr(base.size(), name.size() - base.size() - (sizeof(kStatesSuffix) - 1));
    const size_t dash = middle.find('-');
    const std::string e = middle.substr(0, dash), b = dash == std::string::npos ? "0" : middle.substr(dash + 1);
    if (!all_digits(e) || !all_digits(b)) continue;
    Candidate c;
    c.epoch = std::stoi(e);
    c.batch = std::stoll(b);
    const std::string stem = (p.parent_path().empty() ? std::string() : p.parent_path().string() + "/") + base + middle;
    c.model_path = stem + kModelSuffix;
    c.states_path = stem + kStatesSuffix;
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.epoch != b.epoch ? a.epoch < b.epoch : a.batch < b.batch;
  });
  return out;
}

std::string number_text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

int64_t meta_int(const std::map<std::string, std::string>& m, const char* key, const std::string& path) {
  const auto it = m.find(key);
  EMBER_CHECK(it != m.end(), path, ": metadata has no '", key, "'");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  EMBER_CHECK(!it->second.empty() && *end == '\0' && errno == 0, path, ": metadata '", key, "' is not an integer: ",
              json::shown(it->second));
  return v;
}

double meta_number(const std::map<std::string, std::string>& m, const char* key, const std::string& path) {
  const auto it = m.find(key);
  EMBER_CHECK(it != m.end(), path, ": metadata has no '", key, "'");
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  EMBER_CHECK(!it->second.empty() && *end == '\0' && std::isfinite(v), path, ": metadata '", key,
              "' is not a finite number: ", json::shown(it->second));
  return v;
}

}  // namespace

std::string step_checkpoint_path(const std::string& prefix, int epoch, int64_t batch) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "-%04d-%06" PRId64 "%s", epoch, batch, kModelSuffix);
  return prefix + buf;
}

std::string states_path_of(const std::string& model_path) {
  EMBER_CHECK(ends_with(model_path, kModelSuffix), "checkpoint path '", model_path, "' does not end in .safetensors");
  return model_path.substr(0, model_path.size() - (sizeof(kModelSuffix) - 1)) + kStatesSuffix;
}

void save_training_checkpoint(const std::string& model_path, net::Module& model, const net::SGD& opt,
                              const std::map<std::string, std::string>& model_metadata,
                              const TrainingPosition& p) {
  net::save_model(model_path, model, model_metadata, opt.masters());
  std::map<std::string, std::string> meta = {
      {"optimizer", "sgd"},
      {"steps", std::to_string(opt.steps())},
      {"momentum", number_text(opt.options().momentum)},
      {"position.epoch", std::to_string(p.epoch)},
      {"position.batch", std::to_string(p.batch)},
      {"global_step", std::to_string(p.global_step)},
      {"elapsed_seconds", number_text(p.elapsed_seconds)},
      {"epoch_samples", std::to_string(p.epoch_samples)},
      {"epoch_correct", std::to_string(p.epoch_correct)},
      {"epoch_loss_sum", number_text(p.epoch_loss_sum)},
      {"loss_scale", number_text(p.loss_scale)},
      {"scaler_clean", std::to_string(p.scaler_clean)},
      {"scaler_skipped", std::to_string(p.scaler_skipped)},
      {"scaler_consecutive", std::to_string(p.scaler_consecutive)},
      {"seed", std::to_string(p.seed)},
      {"batch_size", std::to_string(p.batch_size)},
      {"model", model_path}};
  write_cpu_choices(p.cpu, meta);
  save_safetensors(states_path_of(model_path), opt.state(), meta);  // last: it completes the checkpoint
}

TrainingPosition read_training_position(const std::string& states_path) {
  const SafetensorsFile file = load_safetensors(states_path);
  const auto& m = file.metadata;
  TrainingPosition p;
  if (!m.count("position.epoch")) {
    p.complete = false;
    return p;
  }
  p.epoch = int(meta_int(m, "position.epoch", states_path));
  p.batch = meta_int(m, "position.batch", states_path);
  p.global_step = meta_int(m, "global_step", states_path);
  p.elapsed_seconds = meta_number(m, "elapsed_seconds", states_path);
  p.epoch_samples = meta_int(m, "epoch_samples", states_path);
  p.epoch_correct = meta_int(m, "epoch_correct", states_path);
  p.epoch_loss_sum = meta_number(m, "epoch_loss_sum", states_path);
  p.loss_scale = meta_number(m, "loss_scale", states_path);
  p.scaler_clean = meta_int(m, "scaler_clean", states_path);
  p.scaler_skipped = meta_int(m, "scaler_skipped", states_path);
  p.scaler_consecutive = meta_int(m, "scaler_consecutive", states_path);
  p.seed = meta_int(m, "seed", states_path);
  p.batch_size = meta_int(m, "batch_size", states_path);
  p.cpu = read_cpu_choices(m, states_path);
  EMBER_CHECK(p.epoch >= 0 && p.batch >= 0 && p.global_step >= 0 && p.elapsed_seconds >= 0, states_path,
              ": negative position in its metadata");
  return p;
}

std::optional<FoundCheckpoint> find_latest_checkpoint(const std::string& prefix, std::FILE* warnings) {
  const std::vector<Candidate> all = candidates(prefix);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    std::error_code ec;
    if (!fs::exists(it->model_path, ec)) {
      if (warnings) std::fprintf(warnings, "warning: %s has no model file %s: skipped\n", it->states_path.c_str(),
                                 it->model_path.c_str());
      continue;
    }
    try {
      FoundCheckpoint f{it->model_path, it->states_path, read_training_position(it->states_path)};
      if (!f.position.complete) f.position.epoch = it->epoch, f.position.batch = it->batch;
      return f;
    } catch (const Error& e) {
      if (warnings) std::fprintf(warnings, "warning: skipping checkpoint %s: %s\n", it->states_path.c_str(), e.what());
    }
  }
  return std::nullopt;
}

std::vector<std::string> list_checkpoints(const std::string& prefix) {
  std::vector<std::string> out;
  for (const Candidate& c : candidates(prefix)) out.push_back(c.model_path);
  return out;
}

std::vector<std::string> prune_checkpoints(const std::string& prefix, int keep) {
  std::vector<std::string> deleted;
  if (keep <= 0) return deleted;
  const std::vector<Candidate> all = candidates(prefix);
  for (size_t i = 0; i + size_t(keep) < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i].states_path, ec);  // the marker first: a half-deleted pair is never "complete"
    fs::remove(all[i].model_path, ec);
    deleted.push_back(all[i].model_path);
  }
  return deleted;
}

std::string checkpoint_size_text(const std::string& model_path) {
  std::error_code ec;
  uintmax_t bytes = 0;
  for (const std::string& p : {model_path, states_path_of(model_path)})
    if (const uintmax_t n = fs::file_size(p, ec); !ec) bytes += n;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", double(bytes) / 1e6);
  return buf;
}

}  // namespace ember::apps
