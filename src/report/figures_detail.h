// Internal to the figures of the HTML report (src/report/figures*.cpp): what the curve extraction
// (figures_curves.cpp), the sweep grouping (figures_sweeps.cpp) and the figure families
// (figures_training.cpp, figures_lr.cpp, figures_depth.cpp) share, and the Builder that
// build_figures (figures.cpp) hands to each family in turn. The names live in
// report::figures_detail, apart from those of inputs.cpp, report.cpp and svg.cpp.
#pragma once
#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/metrics.h"
#include "report/figures.h"
#include "report/inputs.h"
#include "report/report.h"
#include "report/svg.h"

namespace normlab::report::figures_detail {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline svg::Axis axis(std::string label, bool log = false, bool integer = false) {
  svg::Axis a;
  a.label = std::move(label);
  a.log = log;
  a.integer = integer;
  return a;
}

inline svg::Series line(std::string label, std::vector<double> x, std::vector<double> y,
                        std::string color) {
  svg::Series s;
  s.label = std::move(label);
  s.x = std::move(x);
  s.y = std::move(y);
  s.color = std::move(color);
  return s;
}

// ---- metrics as curves (figures_curves.cpp) ----

using Reduce = std::function<double(const nlohmann::json&)>;

// A number as itself; anything else NaN.
double as_number(const nlohmann::json& v);

// The largest finite number of an array (NaN when it has none); anything else as as_number.
double finite_max(const nlohmann::json& v);

struct Curve {
  std::vector<double> x, y;
  std::vector<bool> updated;  // false: a step whose update the guards skipped
};

// (x, y) of every step line that has `key`; a null value becomes a gap.
Curve curve(const RunInput& r, const std::string& xkey, const char* key,
            const Reduce& reduce = as_number);

bool any_finite(const std::vector<double>& v);

// The last record holding a non-empty array at `key`, or nullptr.
const nlohmann::json* last_with_array(const RunInput& r, const char* key);

// The elements of an array as numbers (as_number).
std::vector<double> array_values(const nlohmann::json& a);

// ---- sweeps as lines (figures_sweeps.cpp) ----

// One line per variant over the learning rate: final loss, failed runs marked at the top edge.
struct LrGroup {
  std::string label;
  std::vector<std::pair<double, double>> points;          // (lr, final loss); NaN = none
  std::vector<std::pair<double, std::string>> failures;   // (lr, status)
  double sensitivity = kNaN, best_loss = kNaN;
  std::map<double, std::pair<double, double>> band;       // lr -> (min, max) over seeds; empty: one seed
};

// Whether a run's grid overrides hold every key of a sweep variant with its value.
bool variant_matches(const nlohmann::json& variant, const nlohmann::json& overrides);

// One group per variant of a sweep: from its sensitivity table when it has one, else its runs
// grouped by everything but the learning rate; failed runs as failures of every matching group.
std::vector<LrGroup> sweep_lr_groups(const SweepInput& sw);

// Sweeps of different model sizes (Wortsman et al. 2023, figure 1).

// One variant (sensitivity row) of one sweep, with the model size of its runs.
struct SizedVariant {
  const SweepInput* sweep = nullptr;
  const SensitivityRow* row = nullptr;
  double params = kNaN;  // non-embedding parameters: summarize()'s total less its embedding group
  std::map<std::string, nlohmann::json> cfg;  // a run's config less the lr and the size keys
  double best_lr = kNaN;  // the learning rate of the lowest finite final loss
  std::string label;      // what differs among all sized variants, size aside
};

// Whether some variant appears at two or more model sizes (one sweep's variants alone differ in
// size only by what they add, such as QK-Norm's gains).
bool several_sizes(const std::vector<SizedVariant>& svs);

// Every sensitivity row of the sweeps with the model size of its runs (rows none of whose runs has
// a config are left out), labelled by what differs among them, size aside.
std::vector<SizedVariant> sized_variants(const ReportInputs& in, const Context& cx);

// ---- figures ----

// What every figure family reads (the inputs, their context, the options) and where it puts what
// it builds: build_figures' figures and not-shown lines. Each family's file derives its own builder
// from it (struct LrFigures : Builder), one member function per figure.
struct Builder {
  const ReportInputs& in;
  const Context& cx;
  const ReportOptions& opt;
  std::vector<Figure>& figures;
  std::vector<std::string>& not_shown;

  std::string xlabel() const { return cx.xkey == metric::tokens ? "tokens" : "step"; }

  // `f` joins the figures when it has something to draw; else "title: missing_reason" joins
  // not_shown.
  void add(Figure f, const std::string& missing_reason);
};

// The figure families, in page order: build_figures calls them in this order.
void loss_figure(const Builder& b);            // figures_training.cpp: the loss over training
void learning_rate_figures(const Builder& b);  // figures_lr.cpp: loss, sensitivity, logits vs lr
void depth_figures(const Builder& b);          // figures_depth.cpp: by layer and by depth
void over_training_figures(const Builder& b);  // figures_training.cpp: grad norm, logits, log Z
void confirmation_figures(const Builder& b);   // figures_confirm.cpp: doctor --confirm's arms

}  // namespace normlab::report::figures_detail
