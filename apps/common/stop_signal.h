// apps/common/stop_signal.h — Ctrl-C (SIGINT) and SIGTERM as a request to
// stop a training run cleanly.
//
// While a StopSignals object lives, the first SIGINT or SIGTERM only sets a
// flag: the training loop (apps/common/fit.cpp) finishes its current step,
// saves a checkpoint, prints how to resume and exits with 128 + the signal
// (130 for SIGINT, 143 for SIGTERM, as a shell reports them). A second
// signal exits at once with the same code (a checkpoint being written then
// is left as it was: files are written atomically, so the previous one
// stays whole). Destruction restores the previous handlers.
#pragma once
#include <csignal>

namespace ember::apps {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // 0, or the first signal received (SIGINT or SIGTERM).
  int requested() const;
  // Forgets a received signal (tests).
  void clear();
  static int exit_code(int signal) { return 128 + signal; }

 private:
  struct sigaction old_int_{}, old_term_{};
};

}  // namespace ember::apps
