// The training status line: on a terminal one line redrawn in place; otherwise a plain line per
// logged step. Also the SIGINT/SIGTERM handling: the first signal asks the trainer (which polls
// between steps) to stop after the step and save a checkpoint, a second one exits at once.
#pragma once
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

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

// Progress of a grid of runs (`compare`, `sweep`): a line per active run, "[NAME] " and its
// status_text (step/total, loss, ETA, ...), and one for the whole grid, "grid: 1/4 runs done |
// elapsed 0m42s | ETA 2m06s", its ETA the steps left to all runs at the rate the grid has trained
// steps so far (all runs together: with parallel runs, their summed rate). On a terminal these
// lines are redrawn in place below the permanent ones (note()); on a pipe or a file each run's
// line is printed as it is logged (train.log_interval) and the grid line whenever a run ends.
class GridProgress {
 public:
  // `runs`: how many runs the grid has; each is plan()ned before the first update. `clock`:
  // seconds on a steady clock (by default std::chrono::steady_clock; tests pass their own).
  GridProgress(std::FILE* out, std::size_t runs, std::function<double()> clock = {});
  // Run i (its name) trains from step `from_step` to `total_steps`; a run with nothing to do
  // (from_step >= total_steps, or already finished: `finished`) counts as done at once.
  void plan(std::size_t i, std::string name, long from_step, long total_steps, bool finished = false);
  void update(std::size_t i, const StepRecord& r);  // a logged step of run i
  // Run i ended: finished (done or diverged: counted done), else interrupted or failed.
  void end(std::size_t i, bool finished = true);
  void note(const std::string& line);  // a permanent line, above the redrawn ones
  void close();                        // ends the redrawn block (a terminal)
  std::string grid_text() const;
  bool terminal() const { return tty_; }

 private:
  struct Run {
    std::string name, line;
    long from = 0, total = 0, step = 0;
    bool active = false, ended = false, done = false;
  };
  void erase();
  void draw();
  std::FILE* out_;
  bool tty_;
  std::size_t drawn_ = 0;  // lines of the block on the terminal now
  std::vector<Run> runs_;
  std::function<double()> clock_;
  double t0_;  // clock_() at the start
};

// On the first SIGINT/SIGTERM: sets the flag stop_signal_received() returns and, when `announce`
// (rank 0), says at once on stderr that training stops after this step and saves a checkpoint.
// On the second: exits at once with kExitInterrupted (the last complete checkpoint stays as it
// is: checkpoints are written atomically).
void install_stop_signals(bool announce = true);
bool stop_signal_received();

}  // namespace normlab::cli
