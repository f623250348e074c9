// The comparison behind the README's first command: the same model trained with several norm
// placements (by default post, pre, peri) on the same data, one run directory each.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "normlab/config.h"
#include "normlab/trainer.h"

namespace normlab {

// One cell of a comparison: the run directory name, its label in the tables ("pre",
// "optim.name=adamw"), the axis it varies ("placement", "optim.name") and its change to the base.
struct CompareVariant {
  std::string name, label, axis;
  std::function<void(Config&)> apply;
};
// The placements (the default comparison): named and labelled by the placement.
std::vector<CompareVariant> placement_variants(const std::vector<Placement>& placements);
// `compare --vary KEY=v1,v2,...`: any config key, one variant per value, labelled KEY=value, in
// OUT/<KEY without its section>-<value>; each value set as `--set KEY=value` would (ConfigError
// naming the key and value when it is not valid).
std::vector<CompareVariant> vary_variants(const Config& base, const std::string& spec);

struct CompareRow {
  Placement placement;    // the run's model.placement
  std::string variant;    // its variant's label (the placement's name for placement variants)
  std::string axis = "placement";
  int seed = 0;                 // seed index k: the run trained with train.seed + k
  std::uint64_t train_seed = 0;  // that seed
  std::string run_dir;
  TrainResult result;  // train loss (last 20 steps), tokens/s (run average), diverged, ...
  std::optional<double> val_loss;  // final val loss; none for an interrupted run
  std::optional<double> bits_per_byte;
  // "done", "diverged" (by train/divergence.h's rule) or "interrupted".
  std::string status() const;
};

// Trains `seeds` runs per placement (lab/seeds.h: seed k with train.seed + k) in
// out_dir/<placement> (seed 0) and out_dir/<placement>_seedK; a run whose directory already holds
// a finished checkpoint is resumed (and so not redone), judged by the DivergenceRule. on_start is
// called before each run with its placement, seed index and directory. Stops at an interrupted
// run; then summary.{json,md} are not written (an earlier complete comparison's stay).
std::vector<CompareRow> run_comparison(
    const Config& base, const std::vector<Placement>& placements, const std::string& out_dir,
    const TrainHooks& hooks, int seeds,
    const std::function<void(Placement, int seed, const std::string& dir)>& on_start);

// The same over any variants (on_start: the variant, seed index and directory).
std::vector<CompareRow> run_comparison(
    const Config& base, const std::vector<CompareVariant>& variants, const std::string& out_dir,
    const TrainHooks& hooks, int seeds,
    const std::function<void(const CompareVariant&, int seed, const std::string& dir)>& on_start);

// One seed per placement in out_dir/<placement>.
std::vector<CompareRow> run_comparison(const Config& base, const std::vector<Placement>& placements,
                                       const std::string& out_dir, const TrainHooks& hooks,
                                       const std::function<void(Placement)>& on_start = {});

// The run directory of seed k of a placement (of a variant).
std::string compare_run_dir(const std::string& out_dir, Placement p, int seed);
std::string compare_run_dir(const std::string& out_dir, const CompareVariant& v, int seed);

// Markdown table of the rows. With one seed per placement, one line per run; with several, one
// line per placement of mean ± std (min–max) over its seeds, then every run, then the pairs of
// placements whose val losses differ by no more than the seed spread.
std::string comparison_table(const std::vector<CompareRow>& rows);

}  // namespace normlab
