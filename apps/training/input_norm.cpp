// apps/training/input_norm.cpp — choosing and building the input normalisation.
#include "apps/training/input_norm.h"

#include "apps/training/flags.h"
#include "engine/error.h"
#include "net/json.h"

namespace ember::apps {

namespace {

// One of mean/std: the flag, else the metadata entry, else the default.
std::vector<double> pick_stats(const std::string& flag_text, const char* flag, const std::map<std::string, std::string>& metadata,
                               const char* key, const std::string& model_path, std::vector<double> fallback,
                               int channels, std::string& source) {
  std::vector<double> v;
  if (!flag_text.empty()) {
    v = parse_number_list(flag_text, flag);
    EMBER_CHECK(int(v.size()) == channels, "--", flag, " needs ", channels, " values (one per channel of the model's input), got ",
                v.size());
    source = cat("--", flag);
  } else if (const auto it = metadata.find(key); it != metadata.end()) {
    try {
      v = parse_number_list(it->second, key);
    } catch (const Error&) {
      fail(cat(model_path, ": metadata ", key, " ", json::shown(it->second), " is not a comma-separated list of numbers"));
    }
    EMBER_CHECK(int(v.size()) == channels, model_path, ": metadata ", key, " has ", v.size(), " values, the model takes ",
                channels, " channels");
    source = "checkpoint metadata";
  } else {
    v = std::move(fallback);
    source = "default";
  }
  return v;
}

}  // namespace

InputStats resolve_input_stats(const std::string& mean_flag, const std::string& std_flag,
                               const std::map<std::string, std::string>& metadata, const std::string& model_path,
                               int channels) {
  EMBER_CHECK(channels == 1 || channels == 3, model_path, ": the model takes ", channels, " channels (1 or 3)");
  const bool rgb = channels == 3;
  InputStats s;
  s.mean = pick_stats(mean_flag, "rgb-mean", metadata, "input_mean", model_path,
                      rgb ? std::vector<double>{123.675, 116.28, 103.53} : std::vector<double>{127.5}, channels,
                      s.mean_source);
  s.std = pick_stats(std_flag, "rgb-std", metadata, "input_std", model_path,
                     rgb ? std::vector<double>{58.395, 57.12, 57.375} : std::vector<double>{63.75}, channels,
                     s.std_source);
  for (double v : s.std)
    EMBER_CHECK(v > 0, "input standard deviation (", s.std_source, ") must be positive, got ", v);
  return s;
}

ChannelNorm channel_norm(const InputStats& stats) {
  ChannelNorm n;
  n.channels = int(stats.mean.size());
  EMBER_CHECK(n.channels >= 1 && n.channels <= 8 && stats.std.size() == stats.mean.size(),
              "input normalisation: ", stats.mean.size(), " means and ", stats.std.size(), " standard deviations");
  for (int c = 0; c < n.channels; ++c) {
    n.mean[c] = float(stats.mean[size_t(c)] / 255.0);
    n.inv_std[c] = float(255.0 / stats.std[size_t(c)]);
  }
  return n;
}

}  // namespace ember::apps
