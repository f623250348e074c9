// The [source] table's checks that need the key table (private to src/config): every entry of
// source.unknown must name a config key. source.unknown's row in the key table (keys.cpp)
// runs them.
#pragma once
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab::detail {

// One message per entry of s.unknown that is not a dotted config key, or that names a key of the
// [source] table itself (which the writer always knows).
std::vector<std::string> source_unknown_errors(const SourceConfig& s);

}  // namespace normlab::detail
