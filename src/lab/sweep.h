// Sweeps: a grid over any config keys, one run directory per point, resumable (a finished run is
// not redone), with the learning-rate sensitivity of Wortsman et al. 2023 ("Small-scale proxies
// for large-scale Transformer training instabilities"):
//   sensitivity = mean over the lr grid of [ min(final_loss(lr), initial_loss) - min_lr final_loss(lr) ]
// computed per variant (every other grid key fixed), where final_loss is the final val loss (the
// train loss for runs without evaluation). A diverged run (train/divergence.h) counts with its
// initial loss.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"
#include "normlab/trainer.h"

namespace normlab {

struct GridAxis {
  std::string key;                  // "section.key"
  std::vector<std::string> values;  // as override strings
};

// "KEY=v1,v2,..." or "KEY=a:b:Nlog" / "KEY=a:b:Nlin" (N points, both ends included).
// Throws ConfigError naming the malformed part.
GridAxis parse_grid_axis(const std::string& spec);

struct SweepPoint {
  std::string name;                                       // directory name
  std::vector<std::pair<std::string, std::string>> overrides;
  int seed = 0;  // seed index k (lab/seeds.h): the point trains with train.seed + k
};

std::vector<SweepPoint> expand_grid(const std::vector<GridAxis>& axes);

// μP across width: for each point trained under model.parametrization = mup, the base model it
// derives (mup_base_model) against the model that sits at the base width in this sweep (a point
// at d_model = mup_base_width, else `base`, the grid's base config, when it is that wide). One
// message per point whose base has another d_ff, number of heads or head size: then the wide
// runs are not the tuned narrow model widened (model.d_ff_mult keeps d_ff in step).
std::vector<std::string> mup_base_mismatches(const std::vector<Config>& cfgs,
                                             const std::vector<SweepPoint>& points,
                                             const Config& base);

// Each point `seeds` times, seeds adjacent: seed 0 keeps the point's name (the single-seed
// layout), seed k >= 1 is NAME_seedK. seeds = 1 returns the points unchanged.
std::vector<SweepPoint> expand_seeds(const std::vector<SweepPoint>& points, int seeds);

// A point's config from the base config: train.seed + point.seed.
void apply_seed(Config& cfg, const SweepPoint& p);

struct SweepRun {
  SweepPoint point;
  // done, diverged (both finished); interrupted, not started (unfinished: a rerun continues
  // them); failed (a worker died, or its files cannot be read).
  std::string status;
  double initial_loss = NAN;
  // final_loss: the loss the sensitivity uses, the final val loss (the train loss without
  // evaluation); none for a run that did not finish as done.
  std::optional<double> final_loss, final_val_loss, train_loss, max_attn_logit;
  // QK-Clip (optim.qk_clip > 0 in the run's config): its threshold tau, the head clips of the run
  // and the largest attention logit it saw (before any clip); tau 0: off or unknown.
  double qk_clip_tau = 0, qk_clip_max_logit = NAN;
  long qk_clip_total = 0;
  long steps = 0;      // the step the run reached (or stopped at)
  std::string message;  // why it diverged, or failed
};

// True for the statuses of a run that has not finished (a rerun of the sweep continues it).
bool sweep_status_unfinished(const std::string& status);

// True when dir holds a sweep_status.json of a finished (done or diverged) run.
bool sweep_point_finished(const std::string& dir);

// Trains one point in dir (resuming a partial run), stopping early and judging its end by the
// DivergenceRule, and writes dir/sweep_status.json. Returns the status ("done", "diverged" or
// "interrupted").
std::string run_sweep_point(const Config& cfg, const std::string& dir, const TrainHooks& hooks);

// A point trained by an external command (`normlab sweep --command`): the command line from its
// template, {KEY} replaced by the point's value of grid key KEY, {out} by the run directory and
// {seed} by the seed index, each single-quoted for /bin/sh. An unknown {name} is a ConfigError
// naming it and the names there are.
std::string external_command(const std::string& templ, const SweepPoint& p, const std::string& dir);

// Judges the run an external command wrote in dir (metrics.jsonl with its end event, config.toml
// for train.steps: what normlab.torch.Probe writes) after the command exited: "failed" when it
// exited non-zero (`exit_note` says how) or wrote no finished run, "interrupted" when its end event
// says so, else "diverged" or "done" by the divergence rule (train/divergence.h) on its step lines
// and end, as doctor judges a run. Writes dir/sweep_status.json except for "interrupted" (a rerun
// of the sweep runs such a point again). Returns the status.
std::string judge_external_point(const std::string& dir, int exit_code, const std::string& exit_note);

// Reads a run directory (sweep_status.json and the end of metrics.jsonl).
SweepRun read_sweep_run(const std::string& dir, const SweepPoint& p);

// With several seeds per point, the sensitivity, best loss and best lr are computed per seed
// (over that seed's runs), and `sensitivity` and `best_loss` are their means over the seeds;
// final_losses is the mean over the seeds at each lr (of the runs with a final loss) with the
// min-max band beside it, and best_lr the lr of the lowest mean final loss.
struct Sensitivity {
  std::map<std::string, std::string> variant;
  std::string label;
  double sensitivity = NAN, best_loss = NAN, best_lr = NAN;
  std::vector<double> lrs, final_losses;  // final_losses: NaN for diverged
  std::vector<double> initial_losses;     // each run's step-1 loss, in the order of lrs
  int diverged = 0;                       // runs without a final loss, over all seeds
  int seeds = 1;
  // One per seed (seeds > 1 only): that seed's sensitivity, best final loss and best lr.
  std::vector<double> seed_sensitivity, seed_best_loss, seed_best_lr;
  // Per lr (seeds > 1 only): the lowest and highest final loss over the seeds.
  std::vector<double> final_loss_min, final_loss_max;
};

std::vector<Sensitivity> lr_sensitivity(const std::vector<SweepRun>& runs, const std::string& lr_key);

nlohmann::json sweep_json(const std::vector<GridAxis>& axes, const std::vector<SweepRun>& runs,
                          const std::vector<Sensitivity>& sens, const std::string& lr_key);

// Markdown: the sensitivity per variant, and the legend saying which loss it uses. With several
// seeds: mean ± std (min–max) over the seeds, the best lr per seed, and sensitivity_notes().
std::string sensitivity_table(const std::vector<Sensitivity>& sens);
// With several seeds: the pairs of variants whose LR sensitivity or best final loss differ by no
// more than the seed spread (lab/seeds.h); empty otherwise.
std::vector<std::string> sensitivity_notes(const std::vector<Sensitivity>& sens);
// Markdown: every run with its status, the step it reached and why it stopped.
std::string runs_table(const std::vector<SweepRun>& runs);

// A sweep read back from its directory `out` (one run directory per point): what `normlab sweep`
// and normlab.sweep() report at the end.
struct SweepSummary {
  std::vector<SweepRun> runs;           // one per point, in grid order
  std::vector<std::string> unfinished;  // "NAME (at step S)", "NAME (not started)"
  bool lr_grid = false;                 // the grid has lr_key: the sensitivity is computed
  std::vector<Sensitivity> sensitivity;
  nlohmann::json json;                  // sweep_json(); null while runs are unfinished
  std::string table;                    // the sensitivity table, or why there is none
};
// Reads every point's run and, when all have finished, computes the sensitivity and writes
// out/sweep.json and out/sensitivity.md (an unfinished sweep leaves an earlier summary alone).
SweepSummary summarize_sweep(const std::string& out, const std::vector<GridAxis>& axes,
                             const std::vector<SweepPoint>& points, const std::string& lr_key);

}  // namespace normlab
