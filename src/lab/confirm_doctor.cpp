// From doctor's diagnosis (its JSON form, contract §3) to the problems confirm tests.
#include "lab/confirm_doctor.h"

#include <fmt/format.h>

#include "doctor/doctor.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab {

namespace {
// A finding without values["statistic"] (a doctor that predates it): the statistic of its kind.
std::string statistic_of_kind(const std::string& kind) {
  if (kind == "attention_logit_growth") return "attn_max_logit";
  if (kind == "loss_spikes") return "spike_count";
  if (kind == "output_logit_divergence") return "log_z_drift";
  if (kind == "residual_growth") return "resid_rms";
  if (kind == "dyt_saturation") return "dyt_saturated";
  if (kind == "unigram_plateau") return "unigram_gap";
  return "loss_end";
}

std::string value_text(const nlohmann::json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// The `--set KEY=VALUE` a plain-text remedy tells the user to pass, for keys the config has.
std::vector<std::pair<std::string, std::string>> sets_in_text(const std::string& text,
                                                              const Config& cfg) {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string mark = "--set ";
  for (std::size_t at = text.find(mark); at != std::string::npos; at = text.find(mark, at + 1)) {
    const std::size_t b = at + mark.size();
    std::size_t e = text.find_first_of(" \t\n", b);
    std::string tok = text.substr(b, e == std::string::npos ? std::string::npos : e - b);
    while (!tok.empty() && std::string(",;:).").find(tok.back()) != std::string::npos)
      tok.pop_back();
    const auto eq = tok.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == tok.size()) continue;
    const std::string key = tok.substr(0, eq);
    if (config_value_text(cfg, key).empty()) continue;
    out.emplace_back(key, tok.substr(eq + 1));
  }
  return out;
}

// Every change already holds in the config (applied to it, it changes nothing).
bool already_in(const std::vector<std::pair<std::string, std::string>>& set, const Config& cfg) {
  if (set.empty()) return false;
  std::vector<std::string> ov;
  for (const auto& [k, v] : set) ov.push_back(k + "=" + v);
  try {
    const Config next = parse_config(dump_config_toml(cfg), "the run's config", ov);
    for (const auto& [k, v] : set)
      if (config_value_text(next, k) != config_value_text(cfg, k)) return false;
    return true;
  } catch (const Error&) {
    return false;  // an invalid change is the plan's to report
  }
}
}  // namespace

std::vector<ConfirmProblem> confirm_problems(const nlohmann::json& diagnosis, const Config& cfg) {
  std::vector<ConfirmProblem> out;
  for (const auto& f : diagnosis.value("findings", nlohmann::json::array())) {
    if (f.value("severity", "") != "problem") continue;
    ConfirmProblem p;
    p.kind = f.value("kind", "");
    p.title = f.value("title", "");
    p.onset_step = f.value("first_step", 0L);
    p.statistic = statistic_of_kind(p.kind);
    const auto values = f.value("values", nlohmann::json::object());
    if (values.contains("statistic") && values["statistic"].is_object()) {
      const auto& s = values["statistic"];
      p.statistic = s.value("name", p.statistic);
      if (s.contains("value") && s["value"].is_number()) p.value = s["value"].get<double>();
      if (s.contains("threshold") && s["threshold"].is_number())
        p.threshold = s["threshold"].get<double>();
      if (s.contains("onset_step") && s["onset_step"].is_number())
        p.onset_step = s["onset_step"].get<long>();
    }
    for (const auto& r : f.value("remedies", nlohmann::json::array())) {
      ConfirmRemedy c;
      if (r.is_string()) {  // a doctor without structured remedies: the --set its text names
        c.text = r.get<std::string>();
        c.set = sets_in_text(c.text, cfg);
      } else if (r.is_object()) {
        c.text = r.value("text", "");
        c.tried = r.value("tried", false);
        const nlohmann::json set = r.value("set", nlohmann::json::object());
        for (const auto& [k, v] : set.items()) c.set.emplace_back(k, value_text(v));
      }
      c.tried = c.tried || already_in(c.set, cfg);
      p.remedies.push_back(std::move(c));
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string config_value_text(const Config& cfg, const std::string& key) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return {};
  const nlohmann::json j = config_to_json(cfg);
  const auto s = j.find(key.substr(0, dot));
  if (s == j.end()) return {};
  const auto v = s->find(key.substr(dot + 1));
  return v == s->end() ? std::string() : value_text(*v);
}

}  // namespace normlab
