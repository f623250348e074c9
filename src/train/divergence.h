// The divergence rule: one verdict per run, the same for `train`, the Python `normlab.train`,
// `sweep`, `compare` and `doctor`. A run is judged by how it ends (Wortsman et al. 2023,
// "Small-scale proxies for large-scale Transformer training instabilities", compute learning-rate
// sensitivity from the final loss of runs trained to the end). A run is *diverged* when
//   1. a step's loss is not finite and the guards let it through, or the run ends with a
//      non-finite final loss;
//   2. the trainer stops it for persistent bad steps (train.max_bad_steps consecutive skipped
//      steps, or that many rollbacks to one checkpoint);
//   3. early stop, to save time: its smoothed training loss stays above the initial loss for a
//      sustained span of updated steps;
//   4. its final loss (the val loss at the end; the train loss when the run has no evaluation)
//      is not below its initial loss. A run of fewer than kMinSpan steps is too short to have
//      learned for sure (its final loss may sit within noise of the initial one, as with a warmup
//      longer than the run): it is diverged at the end only when its train loss is more than
//      kBlowUpFactor times the initial loss, i.e. far worse than the uniform prediction a fresh
//      model starts from.
// Initial loss: the training loss of step 1. Smoothed loss: an exponential moving average of the
// loss of updated steps (skipped steps are the guards' business) with a half-life of
// kHalfLife steps, s_1 = l_1, s_t = s_{t-1} + a (l_t - s_{t-1}), a = 1 - 2^(-1/kHalfLife).
// Sustained span: max(kMinSpan, kSpanFraction * train.steps) consecutive updated steps with
// s_t > initial loss. A spike that recovers decays out of the average within a few half-lives and
// never holds it up for that long; a run that blows up (or plateaus above where it started) does.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "normlab/metrics.h"
#include "normlab/trainer.h"

namespace normlab {

class DivergenceRule {
 public:
  static constexpr double kHalfLife = 10;       // steps
  static constexpr long kMinSpan = 50;          // steps
  static constexpr double kSpanFraction = 0.1;  // of train.steps
  static constexpr double kBlowUpFactor = 2;    // rule 4 for runs shorter than kMinSpan steps

  explicit DivergenceRule(long total_steps);

  // The early-stop rules (1 and 3) on one step's record: a reason when the run should stop as
  // diverged. The first finite record of step 1 sets the initial loss.
  std::optional<std::string> observe(long step, double loss, bool skipped);
  std::optional<std::string> observe(const StepRecord& r) {
    return observe(r.step, r.loss, r.skipped);
  }
  // The verdict at the end of a run that reached train.steps (rules 1 and 4): a reason when it is
  // diverged. `val_loss` wins over `train_loss` when both are given (runs of kMinSpan steps or
  // more; shorter runs are judged by their train loss).
  std::optional<std::string> judge_end(std::optional<double> val_loss,
                                       std::optional<double> train_loss) const;
  // The same on a trainer's result.
  std::optional<std::string> judge_end(const TrainResult& r) const;

  // The initial loss of a run whose step 1 this rule did not observe.
  void set_initial_loss(double loss) { initial_ = loss; }
  // The rule's state (initial loss, smoothed loss, steps above), for a checkpoint: a rule read
  // back continues as the one written.
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j);
  double initial_loss() const { return initial_; }
  double smoothed_loss() const { return ema_; }
  long span() const { return span_; }
  long total_steps() const { return total_; }
  // One paragraph for `normlab sweep --help`, `normlab train --help` and the docs.
  static std::string describe();

 private:
  long total_;
  long span_;
  double initial_;
  double ema_;
  long above_ = 0;  // consecutive updated steps with the smoothed loss above the initial loss
};

// A divergence's reason without its leading "diverged: " (the guards' stop reasons and the end
// event's detail start with it), for messages that say "diverged" themselves.
std::string divergence_reason(std::string_view why);

// with_divergence_rule(hooks, trainer, run_dir), declared in normlab/trainer.h, installs this
// rule into a run's hooks.

}  // namespace normlab
