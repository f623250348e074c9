// Fuzz target: the config parser on arbitrary text, read twice: as a TOML file, and as a list of
// `--set section.key=value` overrides, one per line.
//
// Properties: parse_config either throws normlab::Error (ConfigError) or returns a config that
// passed validation; that config survives the two round trips the rest of normlab relies on
// (dump_config_toml -> parse_config, written as a run's config.toml and read back by resume and
// the report; config_to_json -> JSON text -> config_from_json, stored in checkpoints), giving back
// an equal config.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "normlab/config_file.h"

using namespace normlab;

namespace {

void check_round_trips(const Config& c) {
  FUZZ_CHECK(validation_errors(c).empty());
  const std::string toml = dump_config_toml(c);
  FUZZ_CHECK(parse_config(toml, "dump") == c);  // throws (and so crashes) if it does not parse
  const std::string json_text = config_to_json(c).dump();
  FUZZ_CHECK(config_from_json(nlohmann::json::parse(json_text)) == c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  std::optional<Config> c;
  if (accepts([&] { c.emplace(parse_config(text, "fuzz.toml")); })) check_round_trips(*c);

  std::vector<std::string> overrides;
  for (std::size_t begin = 0; begin <= text.size();) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    if (end > begin) overrides.emplace_back(text.substr(begin, end - begin));  // skip empty lines
    begin = end + 1;
  }
  c.reset();
  if (accepts([&] { c.emplace(parse_config("", "<defaults>", overrides)); })) check_round_trips(*c);
  return 0;
}
