// The training status line: on a terminal one line redrawn in place; otherwise a plain line per
// logged step. Also the SIGINT/SIGTERM flag the trainer polls between steps.
#pragma once
#include <cstdio>

#include "normlab/trainer.h"

namespace normlab::cli {

class StatusLine {
 public:
  explicit StatusLine(std::FILE* out);
  void update(const StepRecord& r);
  void finish();

 private:
  std::FILE* out_;
  bool tty_;
  bool dirty_ = false;
};

void install_stop_signals();
bool stop_signal_received();

}  // namespace normlab::cli
