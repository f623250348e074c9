// Internal to src/report: what report.cpp (the page, the tables) and figures.cpp (the figures)
// share. The runs as the figures see them (label, color, config as "section.key" -> value), the
// helpers that label them, and build_figures, which turns the inputs into report figures.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/metrics.h"
#include "report/inputs.h"
#include "report/report.h"
#include "report/svg.h"

namespace normlab::report {

inline std::string h(std::string_view s) { return svg::escape(s); }

// A config value as table and label text: strings bare, numbers compact, null as a dash.
std::string value_text(const nlohmann::json& v);

// "model.placement" -> "placement".
std::string short_key(const std::string& key);

bool failed_status(const std::string& s);

// One run as the figures see it: its label and color, and its config as "section.key" -> value.
struct RunView {
  const RunInput* run = nullptr;
  std::string label, color;
  std::map<std::string, nlohmann::json> cfg;  // empty without a config
};

struct Context {
  std::vector<std::string> keys;       // every config key, in the order of the structs
  std::vector<std::string> differing;  // keys with at least two distinct values among the runs
  std::vector<RunView> runs;
  std::string xkey = metric::step;           // "tokens" when the runs differ in tokens per step
};

Context make_context(const ReportInputs& in);

// "key=value, ..." of `keys` in `cfg`; short keys unless two share a short name.
std::string label_from(const std::map<std::string, nlohmann::json>& cfg,
                       const std::vector<std::string>& keys);

// Label keys: the differing ones worth naming, placement first.
std::vector<std::string> label_keys(const Context& cx, const std::string& except = "");

struct Figures {
  std::vector<Figure> figures;
  std::vector<std::string> not_shown;  // "Figure title: why", one per figure left out
};

// Every figure the inputs have data for, in page order; the others listed as not shown.
Figures build_figures(const ReportInputs& in, const Context& cx);

}  // namespace normlab::report
