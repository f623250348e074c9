// Internal to src/report: what report.cpp (the page, the tables) and figures.cpp (the figures)
// share. The runs as the figures see them (label, color, config as "section.key" -> value), the
// helpers that label them, and build_figures, which turns the inputs into report figures.
#pragma once
#include <limits>
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
  std::string label, color, dash;  // label: among all the report's runs; dash: svg::dash_pattern
  std::map<std::string, nlohmann::json> cfg;  // empty without a config
};

struct Context {
  std::vector<std::string> keys;       // every config key, in the order of the structs
  std::vector<std::string> differing;  // keys with at least two distinct values among the runs
  std::vector<RunView> runs;
  std::string xkey = metric::step;           // "tokens" when the runs differ in tokens per step
};

Context make_context(const ReportInputs& in);

// One config value in a series label: the placement bare ("post"), any other key as its short
// name and the value ("lr 3e-3"); the full key when `full_key` (two keys share a short name).
std::string label_part(const std::string& key, const nlohmann::json& value, bool full_key = false);

// The label parts of `keys` in `cfg`, joined by ", ": "post, lr 3e-3".
std::string label_from(const std::map<std::string, nlohmann::json>& cfg,
                       const std::vector<std::string>& keys);

// Labels for configs drawn together in one chart: each names the keys, among `keys` (in that order,
// the placement first), that are worth naming and whose values differ among `cfgs` (a key some
// configs lack counts as differing), except `except`; the placement and the optimizer (optim.name)
// come first and read as their values ("peri, muon, lr 3e-3"). Empty where nothing differs.
std::vector<std::string> distinguishing_labels(const std::vector<std::map<std::string, nlohmann::json>>& cfgs,
                                               const std::vector<std::string>& keys,
                                               const std::string& except = "");

// Series labels for the runs of one chart, by what differs among these runs (not among all the
// report's inputs): distinguishing_labels of their configs; a run's name where a run has no
// config or nothing differs. Each leads with the run's name: "name (label)".
std::vector<std::string> chart_labels(const std::vector<const RunView*>& runs, const std::vector<std::string>& keys,
                                      const std::string& except = "");

// Label keys: the differing ones worth naming, placement first.
std::vector<std::string> label_keys(const Context& cx, const std::string& except = "");

// Exponential moving average of a training curve with weight beta per step, bias-corrected (as
// TensorBoard's smoothing when the points are one step apart): s_i = sum_j beta^(x_i - x_j) y_j /
// sum_j beta^(x_i - x_j) over the points averaged so far (x = the steps; unit spacing when x is
// empty). So a curve logged every 10 steps is smoothed over the same ~10-step time constant
// (beta 0.9) as one logged every step, instead of lagging 10 times as far behind. A non-finite y_i is not averaged and s_i is NaN there (the smoothed line breaks where the
// raw one does); a point with use[i] false (a skipped step) is not averaged and s_i carries the
// previous value. beta = 0 returns y.
std::vector<double> ema(const std::vector<double>& y, double beta, const std::vector<bool>& use = {},
                        const std::vector<double>& x = {});

bool is_event(const nlohmann::json& record);
// The last step line (not an event line) of a run's metrics, or nullptr.
const nlohmann::json* last_step_line(const RunInput& r);

// How a run ended, for charts and tables: io/metrics.h's run_end_of (the last `end` event unless
// step lines follow it, else reconstructed from the step lines) with NaN for what is unknown, and
// the validation loss of the last step line that has one when the end event carries none.
struct RunEnd {
  double step = std::numeric_limits<double>::quiet_NaN();  // the step it reached
  std::string reason;  // "done", "interrupted", "diverged", or empty (no end event)
  std::string detail;  // the stop reason in words
  double train_loss = std::numeric_limits<double>::quiet_NaN();  // mean over the last 20 updated steps
  double val_loss = std::numeric_limits<double>::quiet_NaN();    // the last evaluation's
  bool from_event = false;
};
RunEnd run_end(const RunInput& r);

struct Figures {
  std::vector<Figure> figures;
  std::vector<std::string> not_shown;  // "Figure title: why", one per figure left out
};

// Every figure the inputs have data for, in page order; the others listed as not shown.
Figures build_figures(const ReportInputs& in, const Context& cx, const ReportOptions& opt = {});

}  // namespace normlab::report
