// apps/training/stop_signal.cpp — the SIGINT/SIGTERM handler: a flag on the
// first signal, an immediate exit on the second.
#include "apps/training/stop_signal.h"

#include <unistd.h>

namespace ember::apps {
namespace {

volatile std::sig_atomic_t g_received = 0;

// Only async-signal-safe calls here: write(2) and _exit(2).
void on_signal(int sig) {
  if (g_received != 0) {
    static const char quit[] = "\nsecond signal: exiting now, without saving\n";
    (void)!::write(STDERR_FILENO, quit, sizeof(quit) - 1);
    ::_exit(StopSignals::exit_code(sig));
  }
  g_received = sig;
  static const char msg[] = "\nstopping after this step, then saving a checkpoint (press Ctrl-C again to quit at once)\n";
  (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and waits in the loader go on; the loop checks the flag
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

int StopSignals::requested() const { return g_received; }

void StopSignals::clear() { g_received = 0; }

}  // namespace ember::apps
