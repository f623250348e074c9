// The problems `doctor --confirm` tests, read from doctor's diagnosis in its JSON form (to_json of
// doctor.h): each "problem" finding with its statistic (values["statistic"], else the statistic
// of its kind) and its remedies ({"text", "set", "tried"}; a plain-text remedy's changes are the
// `--set KEY=VALUE` its text names, none when it names none). A remedy whose every change the
// run's config already holds is marked tried, whatever doctor said.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/confirm.h"
#include "normlab/config.h"

namespace normlab {

std::vector<ConfirmProblem> confirm_problems(const nlohmann::json& diagnosis, const Config& cfg);

// A key's value in a config as --set text ("0.003", "rmsnorm", "true"); empty for an unknown key.
std::string config_value_text(const Config& cfg, const std::string& key);

}  // namespace normlab
