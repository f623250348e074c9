// The comparison behind the README's first command: the same model trained with several norm
// placements (by default post, pre, peri) on the same data, one run directory each.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "normlab/config.h"
#include "normlab/trainer.h"

namespace normlab {

struct CompareRow {
  Placement placement;
  std::string run_dir;
  TrainResult result;  // train loss (last 20 steps), tokens/s (run average), diverged, ...
  std::optional<double> val_loss;  // final val loss; none for an interrupted run
  std::optional<double> bits_per_byte;
  // "done", "diverged" (by lab/divergence.h's rule) or "interrupted".
  std::string status() const;
};

// Trains one run per placement in out_dir/<placement>; a run whose directory already holds a
// finished checkpoint is resumed (and so not redone), judged by the DivergenceRule. on_start is
// called before each run. Stops at an interrupted run; then summary.{json,md} are not written
// (an earlier complete comparison's stay).
std::vector<CompareRow> run_comparison(const Config& base, const std::vector<Placement>& placements,
                                       const std::string& out_dir, const TrainHooks& hooks,
                                       const std::function<void(Placement)>& on_start = {});

// Markdown table of the rows.
std::string comparison_table(const std::vector<CompareRow>& rows);

}  // namespace normlab
