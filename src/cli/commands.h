// The `normlab` subcommands. Each file registers one subcommand: its options and an action that
// calls the library. Nothing here computes; errors from the library reach main() as exceptions.
#pragma once
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "normlab/config.h"

namespace normlab::cli {

using Action = std::function<int()>;

// Each adds its subcommand to `app` and, when it is chosen, sets `action`.
void add_train(CLI::App& app, Action& action);
void add_eval(CLI::App& app, Action& action);
void add_generate(CLI::App& app, Action& action);
void add_info(CLI::App& app, Action& action);
void add_compare(CLI::App& app, Action& action);
void add_report(CLI::App& app, Action& action);
void add_gradflow(CLI::App& app, Action& action);
void add_coordcheck(CLI::App& app, Action& action);
void add_sweep(CLI::App& app, Action& action);
void add_tokenize(CLI::App& app, Action& action);
void add_tokenizer(CLI::App& app, Action& action);
void add_interop(CLI::App& app, Action& action);
void add_doctor(CLI::App& app, Action& action);
void add_export_metrics(CLI::App& app, Action& action);

// Shared option groups.
struct ConfigOptions {
  std::string config_path;
  std::vector<std::string> overrides;
  void add_to(CLI::App* cmd);
  Config load() const;  // throws ConfigError
};

// A validator accepting exactly the names of enum E (enum_names<E>()), so that help texts and
// checks follow the enum's name table.
template <class E>
CLI::IsMember one_of() {
  const auto names = enum_names<E>();
  return CLI::IsMember(std::vector<std::string>(names.begin(), names.end()));
}

// Parses names already checked by one_of<E>().
template <class E>
std::vector<E> parse_enums(const std::vector<std::string>& names) {
  std::vector<E> out;
  for (const auto& n : names) out.push_back(*enum_from_string<E>(n));
  return out;
}

// Checks for numeric options whose messages a person reads: `--top-k: must be an integer >= 0,
// not 'abc'` rather than CLI11's range printed to 300 digits (which it also printed for text that
// is no number at all). A value that passes converts without error to the option's type.
// Integers from `min` to `max` ("a positive integer" when min is 1).
inline CLI::Validator integer_option(long long min,
                                     long long max = std::numeric_limits<int>::max()) {
  const std::string what = min == 1   ? std::string("a positive integer")
                           : min == 0 ? std::string("an integer >= 0")
                                      : fmt::format("an integer >= {}", min);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        long long v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (ec == std::errc() && end == s.data() + s.size() && v >= min && v <= max) return "";
        if (ec == std::errc() && end == s.data() + s.size() && v > max)
          return fmt::format("must be {} up to {}, not '{}'", what, max, s);
        return fmt::format("must be {}, not '{}'", what, s);
      },
      what);
}
// Finite numbers in [lo, hi] (lo_open: (lo, hi]); the bounds a message shows are written as
// given, so pass them as the user would type them.
inline CLI::Validator number_option(double lo, double hi = std::numeric_limits<double>::infinity(),
                                    bool lo_open = false) {
  std::string what;
  if (std::isinf(hi)) what = fmt::format("a number {} {}", lo_open ? ">" : ">=", lo);
  else if (lo_open) what = fmt::format("a number > {} and <= {}", lo, hi);
  else what = fmt::format("a number from {} to {}", lo, hi);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        const bool parsed =
            !s.empty() && end == s.c_str() + s.size() && errno == 0 && std::isfinite(v);
        if (parsed && (lo_open ? v > lo : v >= lo) && v <= hi) return "";
        return fmt::format("must be {}, not '{}'", what, s);
      },
      what);
}

// Exit codes.
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;     // bad command line or config
constexpr int kExitInput = 3;     // unreadable / malformed input file or data
constexpr int kExitRuntime = 4;   // anything else that failed
constexpr int kExitDiverged = 5;  // training diverged and stopped
constexpr int kExitInterrupted = 130;

}  // namespace normlab::cli
