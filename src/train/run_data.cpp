#include "train/run_data.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "normlab/errors.h"

namespace fs = std::filesystem;

namespace normlab {

void record_data_path(DataConfig& d, const std::string& run_dir) {
  if (d.path.empty()) return;
  const fs::path abs = fs::absolute(d.path).lexically_normal();
  d.path = abs.string();
  d.path_from_run = abs.lexically_relative(fs::absolute(run_dir).lexically_normal()).string();
}

std::string run_data_path(const DataConfig& d, const std::string& run_dir,
                          const std::string& given) {
  if (!given.empty()) return given;
  if (d.path.empty()) return d.path;
  std::error_code ec;
  if (fs::exists(d.path, ec)) return d.path;
  std::string also;
  if (!d.path_from_run.empty()) {
    const fs::path moved = (fs::path(run_dir) / d.path_from_run).lexically_normal();
    if (fs::exists(moved, ec)) return moved.string();
    also = fmt::format(" nor at {} (data.path_from_run = {}, from the run directory)",
                       moved.string(), d.path_from_run);
  }
  const std::string where =
      fs::path(d.path).is_absolute()
          ? fmt::format("the run was trained on {}", d.path)
          : fmt::format("the run was trained on {}, relative to the directory training ran "
                        "in, which runs from before data.path_from_run do not record",
                        d.path);
  const std::string run = run_dir.empty() ? std::string("RUN") : run_dir;
  throw InputError(fmt::format(
      "[data] the training data of run {} is not found: not at data.path = {}{}; {}. Point at "
      "the data with --data: normlab train --resume {} --data PATH, or normlab eval "
      "--checkpoint {} --data PATH (which scores all of PATH, not only its validation split)",
      run, d.path, also, where, run, run));
}

}  // namespace normlab
