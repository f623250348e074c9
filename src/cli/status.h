// The training status line: on a terminal one line redrawn in place; otherwise a plain line per
// logged step. Also the SIGINT/SIGTERM handling: the first signal asks the trainer (which polls
// between steps) to stop after the step and save a checkpoint, a second one exits at once.
#pragma once
#include <cstdio>
#include <string>

#include "normlab/trainer.h"

namespace normlab::cli {

class StatusLine {
 public:
  // `start_step`: the step training starts from in this process (the resumed step), from which
  // the ETA measures the speed.
  explicit StatusLine(std::FILE* out, long start_step = 0);
  void update(const StepRecord& r);
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  bool dirty_ = false;
  long start_step_;
};

// The status line's text for a logged step.
std::string status_text(const StepRecord& r, long start_step);

// On the first SIGINT/SIGTERM: sets the flag stop_signal_received() returns and, when `announce`
// (rank 0), says at once on stderr that training stops after this step and saves a checkpoint.
// On the second: exits at once with kExitInterrupted (the last complete checkpoint stays as it
// is: checkpoints are written atomically).
void install_stop_signals(bool announce = true);
bool stop_signal_received();

}  // namespace normlab::cli
