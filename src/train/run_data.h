// Where a run's training data is, from anywhere: a new run records data.path absolute and, as
// data.path_from_run, relative to its run directory (so a run moved together with its data still
// finds it); eval, train --resume and doctor look in both places and, when the data is in
// neither, say where the run was trained and how to point at the data (--data).
#pragma once
#include <string>

#include "normlab/config.h"

namespace normlab {

// A new run in run_dir: data.path made absolute (lexically normal), data.path_from_run the same
// path relative to run_dir. The embedded corpus (empty data.path) stays empty.
void record_data_path(DataConfig& d, const std::string& run_dir);

// The training data of the run in run_dir: `given` when not empty (a --data option); else
// data.path when it exists, else run_dir / data.path_from_run when that exists; "" for the
// embedded corpus. Throws InputError otherwise, naming both places and the --data fixes.
std::string run_data_path(const DataConfig& d, const std::string& run_dir,
                          const std::string& given = {});

}  // namespace normlab
