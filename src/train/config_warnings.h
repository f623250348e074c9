// Settings that are valid but probably not what the user meant: warnings, not errors. One list,
// printed by `normlab train` ("normlab: warning: ...") and raised by the Python package as
// normlab.NormlabWarning, so that the two cannot drift apart.
#pragma once
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab {

// One sentence per warning (no "warning:" prefix), in a fixed order; empty when there is none.
// `cores` is the number of cores available to the process (available_cores() by default).
std::vector<std::string> config_warnings(const Config& c);
std::vector<std::string> config_warnings(const Config& c, int cores);

}  // namespace normlab
