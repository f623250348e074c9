// `normlab doctor RUN --confirm`: tests each remedy doctor advises against a control. From a
// replay start (the newest intact checkpoint at least a margin before the problem's onset, else
// step 0 with the run's seed) it trains a control arm (the run's own config) and one treatment arm
// per remedy that can be written as config changes, each over K data orders (train.data_seed =
// 0..K-1: seed 0 is the run's own order, so the control's seed 0 replays the run bitwise), over a
// window long enough for the condition to come back. It measures in every arm the statistic that
// made doctor name the problem and the loss at the end of the window, and judges each remedy:
// confirmed, not confirmed, control did not reproduce, or inconclusive (docs/doctor.md,
// "Confirming a remedy", states the rules; judge_remedy() implements them).
//
// This file is the plan and the verdict on numbers; confirm_run.cpp prepares the arms' run
// directories and measures them. The CLI (and the Python binding) run the arms through the sweep
// machinery and render the result.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lab/seeds.h"
#include "normlab/config.h"

namespace normlab {

// What the plan documents (docs/doctor.md, "Confirming a remedy").
struct ConfirmRules {
  // The replay starts at the newest intact checkpoint of step <= onset - margin,
  // margin = max(kMarginSteps, ceil(kMarginFraction * onset)).
  static constexpr long kMarginSteps = 5;
  static constexpr double kMarginFraction = 0.1;
  // The window ends at min(the run's end, onset + kWindowMultiple * (onset - start)), at least
  // kMinWindowAfterOnset steps after the onset (within the run), capped by --max-steps.
  static constexpr double kWindowMultiple = 1.0;
  static constexpr long kMinWindowAfterOnset = 10;
};

// One remedy as doctor gives it (contract: doctor.h's Remedy).
struct ConfirmRemedy {
  std::string text;
  std::vector<std::pair<std::string, std::string>> set;  // (dotted key, value text)
  bool tried = false;
};

// One problem doctor named: the statistic that made it, and its remedies.
struct ConfirmProblem {
  std::string kind;  // the finding's kind (attention_logit_growth, loss_spikes, ...)
  std::string title;
  std::string statistic;  // values["statistic"]["name"]
  double value = 0, threshold = 0;
  long onset_step = 0;
  std::vector<ConfirmRemedy> remedies;
};

// The statistics confirm can measure, and which way is better: every one is lower-is-better; a
// statistic with a threshold has a condition (present when value >= threshold).
bool confirm_statistic_known(const std::string& name);
// The statistic's doctor threshold; none for loss_end (no condition, only differences).
std::optional<double> confirm_default_threshold(const std::string& name);

struct ArmPlan {
  // "control", or the changes ("qk_norm-rmsnorm", as sweep names points; "remedyN" for a remedy
  // without changes): the run directories RUN/confirm/fromS_toE/NAME[_seedK]
  std::string name;
  std::string remedy;  // the remedy's text; empty for the control
  std::vector<std::pair<std::string, std::string>> set;
  std::string cannot;  // why it cannot be confirmed (not run); empty when it is run
};

struct ConfirmPlan {
  ConfirmProblem problem;
  long run_steps = 0;            // the original run's train.steps
  long start_step = 0;           // 0: a fresh run with the run's seed
  std::string start_checkpoint;  // the original run's checkpoint folder (empty for step 0)
  std::string start_why;         // how the start was chosen
  long window_end = 0;           // arms train steps start+1 .. window_end
  std::string window_why;
  int seeds = 3;
  std::vector<ArmPlan> arms;  // arms[0]: the control
  std::vector<std::string> notes;
  // The arms run the user's command (doctor --confirm --command): their data orders are its
  // {seed}, not train.data_seed.
  bool external = false;
  long arms_run() const;
  long estimated_steps() const { return arms_run() * seeds * (window_end - start_step); }
};

// The plan for one problem of a run: `checkpoints` are the run's intact checkpoints as
// (step, folder), `run_steps` the run's train.steps and `run_end` the step it reached.
// `expressible(set)` says why a remedy cannot be run (empty: it can); a remedy that changes a key
// fixed on resume moves the start to step 0 (said in start_why). max_steps > 0 caps the window.
// `cannot(set)`, when given, says why an arm's changes cannot be run (an external command
// without a placeholder for a key); empty: they can. `fixed(key)`, when given, says whether a key
// cannot change on resume (default: normlab's rule, a key not in resumable_keys()).
using CannotRun =
    std::function<std::string(const std::vector<std::pair<std::string, std::string>>&)>;
using FixedOnResume = std::function<bool(const std::string&)>;
ConfirmPlan plan_confirmation(const ConfirmProblem& p, const Config& run_cfg,
                              const std::vector<std::pair<long, std::string>>& checkpoints,
                              long run_end, int seeds, long max_steps,
                              const CannotRun& cannot = {}, const FixedOnResume& fixed = {});

// The config of an arm's seed k: the run's config with the arm's changes, train.data_seed = k,
// train.stop_at = the window's end. Throws ConfigError naming a bad change.
Config arm_config(const ConfirmPlan& plan, const ArmPlan& arm, const Config& run_cfg, int k);

// What one arm measured, per seed (NaN: not measured).
struct ArmResult {
  std::string name, remedy;
  std::vector<double> stat;         // the deciding statistic, per seed
  std::vector<double> loss_end;     // train loss at the end of the window, per seed
  std::vector<bool> diverged;       // the arm's run diverged (counts as the condition present)
  std::vector<std::string> status;  // sweep status per seed ("done", "diverged", "failed"...)
  std::string cannot;
};

struct RemedyVerdict {
  std::string verdict;  // "confirmed", "not confirmed", "control did not reproduce",
                        // "inconclusive", "cannot confirm"
  std::string reason;  // one sentence with the numbers
  int control_present = 0, treatment_present = 0, seeds = 0;
  double diff_mean = NAN, spread = NAN, loss_diff = NAN, loss_spread = NAN;
};

// The verdict rules (docs/doctor.md). `threshold` none: no condition (loss_end), only the paired
// difference decides.
RemedyVerdict judge_remedy(const ArmResult& control, const ArmResult& treatment,
                           std::optional<double> threshold);

// The whole confirmation of one problem: the plan, the arms measured, a verdict per remedy.
struct Confirmation {
  ConfirmPlan plan;
  std::vector<ArmResult> arms;          // arms[0]: the control
  std::vector<RemedyVerdict> verdicts;  // one per arms[1..]
  // The control's seed 0 against the original run over the window: "bitwise" or where it differs.
  std::string replay_check;
  bool replay_bitwise = false;
  std::string command_note;  // --command without {resume_from}: "arms start at step 0 ..."
};

nlohmann::json to_json(const ConfirmPlan& p);
nlohmann::json to_json(const Confirmation& c);

}  // namespace normlab
