// Graceful stop on SIGINT / SIGTERM: the first signal asks the training loop to save a checkpoint and exit
// after the current step; a second one exits at once (status 130 / 143), as a user hammering Ctrl-C expects.
// The handler only sets an atomic flag (async-signal-safe); the loop polls stop_requested() between steps.
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
};

}  // namespace braid::exec
