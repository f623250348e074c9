// The confirmation's arms on disk: their run directories under RUN/confirm/fromS_toE/ (ordinary run
// directories, trained through the sweep machinery), what each measured, and the check that the
// control's seed 0 replays the original run bitwise.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lab/confirm.h"
#include "lab/sweep.h"
#include "normlab/config.h"

namespace normlab {

// The intact checkpoint folders of a run as (step, folder), oldest first: normlab's, or a probed
// run's (probe_checkpoint.json, written by normlab.torch.Probe.save_checkpoint).
std::vector<std::pair<long, std::string>> intact_checkpoints(const std::string& run_dir);

// RUN/confirm/NAME: where the arms of one replay (fromS_toE) live.
std::string confirm_dir(const std::string& run_dir, const std::string& name);

// The arms that are run, seed by seed, as sweep points (name ARM or ARM_seedK, seed k), with
// their configs (arm_config()).
struct ArmPoints {
  std::vector<SweepPoint> points;
  std::vector<Config> configs;
  std::vector<std::size_t> arm;  // the plan's arm index of each point
};
ArmPoints arm_points(const ConfirmPlan& plan, const Config& run_cfg);

// Prepares an arm's run directory once (a rerun finds it and the sweep resumes it): for a start
// at a checkpoint, a copy of that checkpoint as the arm's only one, the run's metrics up to the
// start step, its tokenizer copy and the arm's config.toml, so that training it resumes from the
// start with the arm's config. A start at step 0 needs nothing (the arm is a fresh run).
void prepare_arm_dir(const ConfirmPlan& plan, const std::string& run_dir, const std::string& dir,
                     const Config& cfg);

// The deciding statistic of a run directory's window (start, end] (docs/doctor.md defines each);
// NaN when its records lack the fields. `unigram_entropy`: for unigram_gap.
double measure_statistic(const std::string& name, const std::vector<nlohmann::json>& records,
                         long start, long end, double unigram_entropy);

// The statistic per step record of the window, for curves (the report): the record's largest
// attention logit, residual RMS or saturation fraction, |log Z - its step-1 value|, or the loss
// (spike_count, unigram_gap, loss_end). Steps with no value are left out.
std::vector<std::pair<long, double>> statistic_series(const std::string& name,
                                                      const std::vector<nlohmann::json>& records,
                                                      long start, long end);

// Reads every arm's run directory (OUT/ARM[_seedK]) and judges each remedy against the control;
// checks the control's seed 0 against the original run over the window.
Confirmation measure_confirmation(const ConfirmPlan& plan, const std::string& run_dir,
                                  const std::string& out, double unigram_entropy);

// The control's seed 0 (dir) against the original run (run_dir) over steps start+1..end: the
// loss and gradient norm of every step record equal to the last bit. Returns the message;
// `bitwise` says whether they matched.
std::string replay_check(const std::string& run_dir, const std::string& dir, long start, long end,
                         bool& bitwise);

}  // namespace normlab
