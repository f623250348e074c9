// The sweep's runner, shared with `doctor --confirm` (whose arms are sweep points): trains every
// point of `points` not yet finished in OUT/NAME, in this process with one job, else in up to
// `jobs` worker processes at a time (or, with `command`, each by that external command as
// `sweep --command` runs it), with the progress of each run and of the whole. Resumable: a finished
// point is skipped, an interrupted one continued. Stops starting points on a stop signal.
#pragma once
#include <string>
#include <vector>

#include "lab/sweep.h"
#include "normlab/config.h"

namespace normlab::cli {

void run_sweep_points(const std::string& out, const std::vector<SweepPoint>& points,
                      const std::vector<Config>& cfgs, int jobs, const std::string& command);

}  // namespace normlab::cli
