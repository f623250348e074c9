// Shared fixtures of the config tests (tests/io/test_config_file_*.cpp): the problems a
// ConfigError reports, the problems of parsing a TOML text, and the check that one of them holds a
// given text.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab::test {

// Runs `f`, which must throw ConfigError, and returns its problems.
inline std::vector<std::string> problems_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.problems;
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

inline std::vector<std::string> parse_problems(std::string_view toml,
                                               const std::vector<std::string>& overrides = {}) {
  return problems_of([&] { parse_config(toml, "cfg.toml", overrides); });
}

inline ::testing::AssertionResult has_problem(const std::vector<std::string>& problems,
                                              std::string_view needle) {
  for (const auto& p : problems)
    if (p.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no problem contains [" << needle << "]; got:\n  "
         << fmt::format("{}", fmt::join(problems, "\n  "));
}

}  // namespace normlab::test
