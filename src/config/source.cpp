// config.toml's [source] table: where a run came from and which of its keys are unknown
// (include/normlab/config.h, docs/cli.md).
#include "config/source.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/keys.h"

namespace normlab {

bool SourceConfig::knows(std::string_view key) const {
  return std::find(unknown.begin(), unknown.end(), key) == unknown.end();
}

namespace detail {

std::vector<std::string> source_unknown_errors(const SourceConfig& s) {
  std::vector<std::string> out;
  for (const std::string& key : s.unknown) {
    const std::string_view k = key;
    const auto dot = k.find('.');
    const std::string_view section = dot == k.npos ? std::string_view() : k.substr(0, dot);
    const std::string_view name = dot == k.npos ? k : k.substr(dot + 1);
    if (keytab::find_key(section, name) == nullptr)
      out.push_back(fmt::format("source.unknown: {}", keytab::unknown_key_message(section, name)));
    else if (section == "source")
      out.push_back(fmt::format("source.unknown: '{}' cannot be unknown: the [source] table "
                                "describes the run's origin, which its writer knows",
                                key));
  }
  return out;
}

}  // namespace detail
}  // namespace normlab
