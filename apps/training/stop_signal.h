// apps/training/stop_signal.h — Ctrl-C (SIGINT) and SIGTERM as a request to
// stop a training run cleanly.
//
// While a StopSignals object lives, the first SIGINT or SIGTERM only sets a
// flag: the training loop (apps/training/fit.cpp) finishes its current step,
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

// The stop data-parallel ranks agree on, from the sum over ranks of their
// requests (0 when none had asked) taken by one collective: every rank sees
// the same sum, so every rank stops after the same step. `local` (this
// rank's request read now) only names the signal; a request that arrived
// after the collective waits for the next one (deciding on it here would
// stop this rank a step before the others: a broken ring).
inline int agreed_stop_signal(double sum_of_requests, int local) {
  if (sum_of_requests <= 0) return 0;
  return local ? local : SIGTERM;
}

}  // namespace ember::apps
