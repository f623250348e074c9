// What `eval`, `generate` and `train --resume` add to the message of a damaged checkpoint
// (DamagedCheckpointError, normlab/checkpoint.h): the command that uses the run's newest intact
// checkpoint instead, which is the user's own command line with the checkpoint replaced.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "normlab/checkpoint.h"
#include "normlab/errors.h"

namespace normlab::cli {

// The arguments the process was started with, after the program name (main() sets them).
inline std::vector<std::string>& command_args() {
  static std::vector<std::string> args;
  return args;
}

// One argument as a POSIX shell reads it back: as it is when it holds only safe characters,
// else in single quotes.
inline std::string shell_quoted(const std::string& a) {
  const bool safe = !a.empty() && a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqr"
                                                      "stuvwxyz0123456789_./=:,+-@%") ==
                                      std::string::npos;
  if (safe) return a;
  std::string q = "'";
  for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// "normlab ARGS" with the argument `given` (alone, or as --opt=given) replaced by `replacement`;
// empty when the arguments do not hold `given`.
inline std::string command_with(const std::string& given, const std::string& replacement) {
  std::string out = "normlab";
  bool found = false;
  for (const std::string& a : command_args()) {
    std::string b = a;
    if (!found && a == given) {
      b = replacement, found = true;
    } else if (const auto eq = a.find('='); !found && a.starts_with("--") &&
                                            eq != std::string::npos && a.substr(eq + 1) == given) {
      b = a.substr(0, eq + 1) + replacement, found = true;
    }
    out += " " + shell_quoted(b);
  }
  return found ? out : std::string();
}

// Runs f(); a DamagedCheckpointError becomes a FormatError whose message ends with
// "use the newest intact one: <command>", the user's command line with the checkpoint argument
// `given` replaced by RUN/checkpoints/step_K (or, when the arguments do not hold it, `use`, the
// command line up to the checkpoint, "normlab eval --checkpoint", and the checkpoint).
template <class F>
decltype(auto) with_checkpoint_hint(const std::string& use, const std::string& given, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const DamagedCheckpointError& e) {
    if (e.intact.empty()) throw FormatError(e.what());
    std::string cmd = command_with(given, e.intact.front());
    if (cmd.empty()) cmd = use + " " + shell_quoted(e.intact.front());
    throw FormatError(fmt::format("{}\nuse the newest intact one: {}", e.what(), cmd));
  }
}

}  // namespace normlab::cli
