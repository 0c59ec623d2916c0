// Signal handlers for a graceful stop; see signals.h.
#include "exec/signals.h"

#include <csignal>
#include <unistd.h>

#include <atomic>

namespace braid::exec {
namespace {

std::atomic<int> g_signal{0};
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  if (g_signal.load() != 0) _exit(128 + sig);  // second signal: leave now
  g_signal.store(sig);
  const char msg[] = "\nbraid: stopping after this step (saving a checkpoint); signal again to quit at once\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals() {
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

bool StopSignals::stop_requested() { return g_signal.load() != 0; }
int StopSignals::signal_number() { return g_signal.load(); }

}  // namespace braid::exec
