// Graceful stop on SIGINT / SIGTERM: the first signal asks the training loop to save a checkpoint and exit
// after the current step; a second one exits at once (status 130 / 143), as a user hammering Ctrl-C expects.
// The handler only sets an atomic flag (async-signal-safe); the loop polls stop_requested() between steps.
//
// Where the signal runs matters as much as what the handler does: oneDNN 2.x's JIT sgemm kernels point the
// stack pointer into a heap workspace while they run, so a signal delivered to a thread inside one writes
// its frame into the heap (oneDNN issue 4845, fixed upstream in 3.11; Debian 12 ships 2.6.3). braid's main
// therefore calls route_signals_to_one_thread() before any other thread exists: SIGINT and SIGTERM are
// blocked in every thread (threads inherit the mask) and one thread that runs no kernel takes them with
// sigwait and runs the installed handler there. No compute thread is ever interrupted.
#pragma once

namespace braid::exec {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  static bool stop_requested();
  static int signal_number();  // which signal asked (0 if none)
  // What the first signal prints (one line; set before training starts, e.g. whether a checkpoint is saved).
  static void set_stop_message(const char* line);
};

// Blocks SIGINT and SIGTERM in the calling thread (and so in every thread it creates later) and starts the
// one thread that receives them: it runs the handler installed with sigaction (StopSignals', the
// launcher's), dies of the signal as usual under SIG_DFL, and drops it under SIG_IGN. Call first in main,
// before any thread exists; calling again does nothing. Child processes must unblock the two signals
// before exec (braid launch does; the mask survives exec).
void route_signals_to_one_thread();
// True once route_signals_to_one_thread() ran in this process.
bool signals_routed();
// The thread id (gettid) of the signal thread, 0 if none: tests check that handlers run there.
long signal_thread_id();

}  // namespace braid::exec
