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
  TrainResult result;
  double val_loss = 0;
  double bits_per_byte = 0;
};

// Trains one run per placement in out_dir/<placement>; a run whose directory already holds a
// finished checkpoint is resumed (and so not redone). on_start is called before each run.
std::vector<CompareRow> run_comparison(const Config& base, const std::vector<Placement>& placements,
                                       const std::string& out_dir, const TrainHooks& hooks,
                                       const std::function<void(Placement)>& on_start = {});

// Markdown table of the rows.
std::string comparison_table(const std::vector<CompareRow>& rows);

}  // namespace normlab
