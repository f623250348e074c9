// The `normlab` subcommands. Each file registers one subcommand: its options and an action that
// calls the library. Nothing here computes; errors from the library reach main() as exceptions.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

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
void add_sweep(CLI::App& app, Action& action);
void add_tokenize(CLI::App& app, Action& action);
void add_interop(CLI::App& app, Action& action);

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

// Exit codes.
constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;     // bad command line or config
constexpr int kExitInput = 3;     // unreadable / malformed input file or data
constexpr int kExitRuntime = 4;   // anything else that failed
constexpr int kExitDiverged = 5;  // training diverged and stopped
constexpr int kExitInterrupted = 130;

}  // namespace normlab::cli
