// The head of a study's summary file (compare's summary.md, sweep's sensitivity.md): what made
// it, so that it can be rerun and its numbers read against the machine: the command line,
// normlab's version, the date, the CPU and the config.
#pragma once
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "normlab/config.h"

namespace normlab::cli {

// normlab's version, CMake's project(VERSION) (the one definition `--version` and the Python
// package's __version__ also print).
std::string_view normlab_version();

// This process's command line as a shell would take it back (arguments quoted where needed).
std::string command_line();

// The CPU's model name from /proc/cpuinfo ("unknown CPU" when it has none).
std::string cpu_model_name();

// Markdown: a title line, then the command line, version, date (UTC), CPU (model name, the
// cores available, the threads each run trains with and how many run at once) and the config
// (its file and --set overrides, then every key as resolved, TOML in a fenced block).
// `run_threads`: train.threads as each run uses it (0: all available cores).
std::string summary_header(std::string_view title, const ConfigOptions& opts, const Config& cfg,
                           int run_threads, int parallel_runs = 1);

// Writes `head` before the file's content (atomically: a temporary file renamed over it).
void prepend_to_file(const std::string& path, const std::string& head);

}  // namespace normlab::cli
