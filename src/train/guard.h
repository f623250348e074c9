// The spike guard: z-scores of the loss and of the gradient norm against the last `window`
// finite steps (in the manner of OLMo-core's skip-step AdamW). Its window is part of the
// training state so that a resumed run takes the same decisions.
#pragma once
#include <deque>

#include <nlohmann/json.hpp>

#include "normlab/config.h"

namespace normlab {

// What the guards do with a step: apply its update, skip it (no parameter or moment touched),
// or roll back to the last checkpoint.
enum class StepAction { update, skip, rollback };

struct StepDecision {
  StepAction action = StepAction::update;
  bool finite = true;  // loss and gradient norm finite
  bool spike = false;  // flagged by the z-score test
  int bad_run = 0;     // consecutive steps not updated, this one included
  bool rollback_unavailable = false;  // a spike to roll back, skipped: no checkpoint yet
};

class SpikeGuard {
 public:
  SpikeGuard(int window, double threshold) : window_(window), threshold_(threshold) {}
  // The guards' decision for a step with this loss and gradient norm. A non-finite step is always
  // skipped; a spike is skipped, rolled back (only when `can_rollback`: else skipped) or let
  // through, by `policy`. Records every finite step that is not rolled back into the window
  // (skipped or not: a lasting shift of the loss level becomes the new normal after a few steps
  // instead of freezing training) and counts consecutive bad steps.
  StepDecision decide(double loss, double grad_norm, SpikePolicy policy, bool can_rollback);
  // True when the window is full and the loss or the gradient norm lies more than `threshold`
  // standard deviations above the window's mean.
  bool is_spike(double loss, double grad_norm) const;
  // Records a finite step (whether or not its update was applied).
  void record(double loss, double grad_norm);
  // The window and the count of consecutive bad steps. A resume takes both (`with_bad_run`: a run
  // of bad steps that straddles the checkpoint stops where the straight run stops); a rollback
  // takes the window only, since the steps it undoes count as bad ones (train/rollback.h).
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j, bool with_bad_run);

 private:
  static double zscore(const std::deque<double>& w, double x);
  int window_;
  double threshold_;
  std::deque<double> loss_, grad_;
  int bad_run_ = 0;  // consecutive steps not updated
};

}  // namespace normlab
