// Typed exceptions thrown by the normlab library. Only the command-line front end turns them into
// messages and exit codes; nothing in the library calls exit() or abort().
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace normlab {

// Base of every error normlab throws on purpose.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One or more invalid configuration values; `problems` holds one line per offending key.
struct ConfigError : Error {
  std::vector<std::string> problems;
  explicit ConfigError(std::vector<std::string> p) : Error(join(p)), problems(std::move(p)) {}
  static std::string join(const std::vector<std::string>& p) {
    std::string s = "invalid configuration:";
    for (const auto& x : p) s += "\n  " + x;
    return s;
  }
};

// A file that cannot be read, is truncated, malformed, or does not match what was asked for.
struct FormatError : Error {
  using Error::Error;
};

// Input data that is out of range for the model (a token id >= vocab, a sequence too long, ...).
struct InputError : Error {
  using Error::Error;
};

// A broken internal invariant: a bug in normlab, never the user's fault.
struct InternalError : Error {
  using Error::Error;
};

}  // namespace normlab

// Invariant check that stays on in release builds.
#define NL_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw ::normlab::InternalError(fmt::format("{}:{}: check failed: {}: {}", __FILE__, __LINE__, \
                                                 #cond, fmt::format(__VA_ARGS__)));                \
  } while (0)
