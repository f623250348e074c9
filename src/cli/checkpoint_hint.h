// What `eval`, `generate` and `train --resume` add to the message of a damaged checkpoint
// (DamagedCheckpointError, normlab/checkpoint.h): the command that uses the run's newest intact
// checkpoint instead.
#pragma once
#include <string>
#include <utility>

#include <fmt/format.h>

#include "normlab/checkpoint.h"
#include "normlab/errors.h"

namespace normlab::cli {

// Runs f(); a DamagedCheckpointError becomes a FormatError whose message ends with
// "use the newest intact one: <use> RUN/checkpoints/step_K" (`use`: the command line up to the
// checkpoint, "normlab eval --checkpoint").
template <class F>
decltype(auto) with_checkpoint_hint(const std::string& use, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const DamagedCheckpointError& e) {
    if (e.intact.empty()) throw FormatError(e.what());
    throw FormatError(
        fmt::format("{}\nuse the newest intact one: {} {}", e.what(), use, e.intact.front()));
  }
}

}  // namespace normlab::cli
