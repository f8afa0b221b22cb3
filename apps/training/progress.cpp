// apps/training/progress.cpp — the progress bar and the metrics file.
#include "apps/training/progress.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/error.h"

namespace ember::apps {

ProgressMode choose_progress_mode(bool quiet, std::FILE* out) {
  if (quiet) return ProgressMode::quiet;
  return ::isatty(::fileno(out)) ? ProgressMode::bar : ProgressMode::lines;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(std::llround(seconds));
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                  (long long)(s % 60));
  else
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  return buf;
}

std::string progress_bar_text(const ProgressView& v, int width) {
  char head[48], tail[160];
  std::snprintf(head, sizeof(head), "Epoch %d/%d ", v.epoch + 1, v.num_epochs);
  std::snprintf(tail, sizeof(tail), " %lld/%lld  %.0f img/s  loss %.3f  acc %.3f  ETA %s  run %s", (long long)v.batch,
                (long long)v.batches, v.img_per_sec, v.loss, v.accuracy, format_duration(v.epoch_eta).c_str(),
                format_duration(v.run_eta).c_str());
  // The bar takes what is left of the width, 10 to 30 cells.
  const int room = width - int(std::strlen(head)) - int(std::strlen(tail)) - 2;
  const int cells = std::clamp(room, 10, 30);
  const double frac = v.batches > 0 ? std::clamp(double(v.batch) / double(v.batches), 0.0, 1.0) : 0.0;
  const int full = int(frac * cells);
  std::string line = head;
  line += '[';
  line.append(size_t(full), '#');
  line.append(size_t(cells - full), '.');
  line += ']';
  line += tail;
  if (int(line.size()) > width) line.resize(size_t(std::max(0, width)));
  return line;
}

void ProgressBar::update(const ProgressView& view, bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && drawn_ && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  std::fprintf(out_, "\r%s\033[K", progress_bar_text(view).c_str());
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::clear() {
  if (!drawn_) return;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
  drawn_ = false;
}

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);  // a failure shows in fopen's error
  file_ = std::fopen(path.c_str(), "a");
  EMBER_CHECK(file_, "--metrics ", path, ": cannot open for appending: ", std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(json::Object record) {
  if (!file_) return;
  const std::string line = json::write(json::Value(std::move(record))) + "\n";
  EMBER_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0, "--metrics ",
              path_, ": write failed: ", std::strerror(errno));
}

json::Value metric(double v) { return std::isfinite(v) ? json::Value(v) : json::Value(); }

double peak_rss_mib() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return double(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

}  // namespace ember::apps
