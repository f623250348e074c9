// Sweeps: a grid over any config keys, one run directory per point, resumable (a finished run is
// not redone), with the learning-rate sensitivity of Wortsman et al. 2023 ("Small-scale proxies
// for large-scale Transformer training instabilities"):
//   sensitivity = mean over the lr grid of [ min(final_loss(lr), initial_loss) - min_lr final_loss(lr) ]
// computed per variant (every other grid key fixed). A diverged run counts with its initial loss.
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
};

std::vector<SweepPoint> expand_grid(const std::vector<GridAxis>& axes);

struct SweepRun {
  SweepPoint point;
  std::string status;  // done, diverged, failed
  double initial_loss = NAN;
  std::optional<double> final_loss, final_val_loss, max_attn_logit;
  std::string message;
};

// Divergence rule used by sweeps: non-finite loss, or (from step 10 on) a loss above the first
// step's loss.
std::optional<std::string> sweep_divergence(long step, double loss, double initial_loss);

// True when dir holds a sweep_status.json of a finished (done or diverged) run.
bool sweep_point_finished(const std::string& dir);

// Trains one point in dir (resuming a partial run), stopping early by sweep_divergence, and
// writes dir/sweep_status.json. Returns the status ("done" or "diverged").
std::string run_sweep_point(const Config& cfg, const std::string& dir, const TrainHooks& hooks);

// Reads a finished run directory (metrics.jsonl + sweep_status.json).
SweepRun read_sweep_run(const std::string& dir, const SweepPoint& p);

struct Sensitivity {
  std::map<std::string, std::string> variant;
  std::string label;
  double sensitivity = NAN, best_loss = NAN, best_lr = NAN;
  std::vector<double> lrs, final_losses;  // final_losses: NaN for diverged
  int diverged = 0;
};

std::vector<Sensitivity> lr_sensitivity(const std::vector<SweepRun>& runs, const std::string& lr_key);

nlohmann::json sweep_json(const std::vector<GridAxis>& axes, const std::vector<SweepRun>& runs,
                          const std::vector<Sensitivity>& sens, const std::string& lr_key);

std::string sensitivity_table(const std::vector<Sensitivity>& sens);

}  // namespace normlab
