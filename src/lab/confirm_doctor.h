// The problems `doctor --confirm` tests, read from doctor's diagnosis in its JSON form (to_json of
// doctor.h): each "problem" finding with its statistic (values["statistic"], else the statistic
// of its kind) and its remedies ({"text", "set", "tried"}; a plain-text remedy has no `set` and
// cannot be confirmed).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/confirm.h"
#include "normlab/config.h"

namespace normlab {

std::vector<ConfirmProblem> confirm_problems(const nlohmann::json& diagnosis);

// A key's value in a config as --set text ("0.003", "rmsnorm", "true"); empty for an unknown key.
std::string config_value_text(const Config& cfg, const std::string& key);

}  // namespace normlab
