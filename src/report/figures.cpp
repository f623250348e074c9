// The figures of the HTML report: each built from the runs, sweeps and gradflow studies that have
// its data, or listed as not shown with the reason.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "io/metrics.h"
#include "model/summary.h"
#include "normlab/metrics.h"
#include "report/figures.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kMinSmoothed = 10;  // fewer logged points than this are drawn raw
}  // namespace

std::vector<double> ema(const std::vector<double>& y, double beta, const std::vector<bool>& use,
                        const std::vector<double>& x) {
  if (!(beta > 0)) return y;
  std::vector<double> out(y.size(), kNaN);
  double m = 0, weight = 0;  // weight: the total weight of the points averaged so far
  double x_prev = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;  // a gap stays a gap
    if (use.empty() || use[i]) {
      const double xi = x.empty() ? static_cast<double>(i) : x[i];
      const double b = weight > 0 ? std::pow(beta, xi - x_prev) : 0;  // beta per step between points
      m = b * m + y[i];
      weight = b * weight + 1;
      x_prev = xi;
    }
    if (weight > 0) out[i] = m / weight;
  }
  return out;
}

bool is_event(const json& record) { return record.contains(metric::event); }

const json* last_step_line(const RunInput& r) {
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it)
    if (!is_event(*it)) return &*it;
  return nullptr;
}

RunEnd run_end(const RunInput& r) {
  RunEnd e;
  const std::optional<normlab::RunEnd> end = run_end_of(r.metrics);
  if (!end) return e;
  e.from_event = end->from_event;
  e.step = static_cast<double>(end->step);
  e.reason = end->reason;
  e.detail = end->detail;
  if (end->train_loss) e.train_loss = *end->train_loss;
  if (end->val_loss) e.val_loss = *end->val_loss;
  // An end event without a validation loss (interrupted before the final evaluation): the last
  // evaluation logged on a step line.
  if (!std::isfinite(e.val_loss))
    for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it)
      if (!is_event(*it) && it->contains(metric::val_loss)) {
        e.val_loss = number_or_nan(*it, metric::val_loss);
        break;
      }
  return e;
}

namespace {

svg::Axis axis(std::string label, bool log = false, bool integer = false) {
  svg::Axis a;
  a.label = std::move(label);
  a.log = log;
  a.integer = integer;
  return a;
}

svg::Series line(std::string label, std::vector<double> x, std::vector<double> y, std::string color) {
  svg::Series s;
  s.label = std::move(label);
  s.x = std::move(x);
  s.y = std::move(y);
  s.color = std::move(color);
  return s;
}

// ---- metrics as curves ----

using Reduce = std::function<double(const json&)>;

double as_number(const json& v) { return v.is_number() ? v.get<double>() : kNaN; }

double finite_max(const json& v) {
  double m = kNaN;
  if (!v.is_array()) return as_number(v);
  for (const auto& e : v)
    if (e.is_number() && std::isfinite(e.get<double>()) && !(e.get<double>() <= m)) m = e.get<double>();
  return m;
}

struct Curve {
  std::vector<double> x, y;
  std::vector<bool> updated;  // false: a step whose update the guards skipped
};

// (x, y) of every step line that has `key`; a null value becomes a gap.
Curve curve(const RunInput& r, const std::string& xkey, const char* key, const Reduce& reduce = as_number) {
  Curve c;
  for (const auto& rec : r.metrics) {
    const auto it = rec.find(key);
    if (it == rec.end() || is_event(rec)) continue;
    c.x.push_back(number_or_nan(rec, xkey.c_str()));
    c.y.push_back(reduce(*it));
    c.updated.push_back(!rec.value(metric::skipped, false));
  }
  return c;
}

bool any_finite(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

// The last record holding a non-empty array at `key`, or nullptr.
const json* last_with_array(const RunInput& r, const char* key) {
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it) {
    const auto f = it->find(key);
    if (f != it->end() && f->is_array() && !f->empty()) return &*it;
  }
  return nullptr;
}

std::vector<double> array_values(const json& a) {
  std::vector<double> out;
  for (const auto& e : a) out.push_back(as_number(e));
  return out;
}

// One line per variant over the learning rate: final loss, failed runs marked at the top edge.
struct LrGroup {
  std::string label;
  std::vector<std::pair<double, double>> points;          // (lr, final loss); NaN = none
  std::vector<std::pair<double, std::string>> failures;   // (lr, status)
  double sensitivity = kNaN, best_loss = kNaN;
};

// One group per variant of a sweep: from its sensitivity table when it has one, else its runs
// grouped by everything but the learning rate; failed runs as failures of every matching group.
// Whether a run's grid overrides hold every key of a sweep variant with its value.
bool variant_matches(const json& variant, const json& overrides) {
  if (!variant.is_object()) return true;
  for (const auto& [k, val] : variant.items())
    if (!overrides.is_object() || !overrides.contains(k) || !same_value(overrides[k], val)) return false;
  return true;
}

std::vector<LrGroup> sweep_lr_groups(const SweepInput& sw) {
  std::vector<LrGroup> groups;
  const auto matches = variant_matches;
  const auto lr_of = [&](const SweepRun& r) {
    return r.overrides.contains(sw.lr_key) ? as_double(r.overrides[sw.lr_key]) : kNaN;
  };
  std::vector<json> variants;
  if (!sw.sensitivity.empty()) {
    for (const auto& row : sw.sensitivity) {
      LrGroup g;
      g.label = row.label;
      g.sensitivity = row.sensitivity;
      g.best_loss = row.best_loss;
      for (std::size_t i = 0; i < row.lrs.size(); ++i) g.points.emplace_back(row.lrs[i], row.final_losses[i]);
      groups.push_back(std::move(g));
      variants.push_back(row.variant);
    }
  } else {
    // No sensitivity table: group the runs by everything but the learning rate.
    for (const auto& r : sw.runs) {
      json variant = r.overrides.is_object() ? r.overrides : json::object();
      variant.erase(sw.lr_key);
      const auto it = std::find(variants.begin(), variants.end(), variant);
      if (it == variants.end()) {
        variants.push_back(variant);
        groups.emplace_back();
      }
    }
    for (const auto& r : sw.runs) {
      json variant = r.overrides.is_object() ? r.overrides : json::object();
      variant.erase(sw.lr_key);
      const std::size_t gi = std::find(variants.begin(), variants.end(), variant) - variants.begin();
      groups[gi].points.emplace_back(lr_of(r), failed_status(r.status) ? kNaN : r.final_loss);
    }
  }
  // Labelled by what differs among the variants: "post", "post, qk_norm rmsnorm".
  std::vector<std::map<std::string, json>> cfgs;
  std::set<std::string> key_set;
  for (const auto& v : variants) {
    cfgs.emplace_back();
    if (!v.is_object()) continue;
    for (const auto& [k, val] : v.items()) {
      cfgs.back()[k] = val;
      key_set.insert(k);
    }
  }
  const std::vector<std::string> labels =
      distinguishing_labels(cfgs, std::vector<std::string>(key_set.begin(), key_set.end()), sw.lr_key);
  for (std::size_t gi = 0; gi < groups.size(); ++gi)
    groups[gi].label = !labels[gi].empty() ? labels[gi] : !groups[gi].label.empty() ? groups[gi].label : sw.name;
  for (const auto& r : sw.runs) {
    if (!failed_status(r.status)) continue;
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      if (matches(variants[gi], r.overrides))
        groups[gi].failures.emplace_back(lr_of(r), r.message.empty() ? r.status : r.status + ": " + r.message);
  }
  return groups;
}

// ---- sweeps of different model sizes (Wortsman et al. 2023, figure 1) ----

// Keys that set the model's size: variants of sweeps that differ only in these (and in the
// learning rate) are one line against the parameter count.
bool size_key(const std::string& key) {
  static const std::set<std::string> keys{"model.d_model", "model.n_head", "model.n_kv_head",
                                          "model.head_dim", "model.d_ff", "model.n_layer"};
  return keys.count(key) > 0;
}

// One variant (sensitivity row) of one sweep, with the model size of its runs.
struct SizedVariant {
  const SweepInput* sweep = nullptr;
  const SensitivityRow* row = nullptr;
  double params = kNaN;  // non-embedding parameters: summarize()'s total less its embedding group
  std::map<std::string, json> cfg;  // a run's config less the learning rate and the size keys
  double best_lr = kNaN;            // the learning rate of the lowest finite final loss
  std::string label;                // what differs among all sized variants, size aside
};

double non_embedding_params(const Config& c) {
  const ModelSummary m = summarize(c.model, 1);
  const auto it = m.params_by_group.find("embedding");
  return double(m.params - (it == m.params_by_group.end() ? 0 : it->second));
}

// Whether some variant appears at two or more model sizes (one sweep's variants alone differ in
// size only by what they add, such as QK-Norm's gains).
bool several_sizes(const std::vector<SizedVariant>& svs) {
  std::map<std::string, std::set<double>> sizes;
  for (const auto& sv : svs) sizes[sv.label].insert(sv.params);
  for (const auto& [label, s] : sizes)
    if (s.size() >= 2) return true;
  return false;
}

std::vector<SizedVariant> sized_variants(const ReportInputs& in, const Context& cx) {
  std::vector<SizedVariant> out;
  for (const auto& sw : in.sweeps)
    for (const auto& row : sw.sensitivity) {
      SizedVariant sv;
      sv.sweep = &sw;
      sv.row = &row;
      for (const auto& r : sw.runs) {
        if (!variant_matches(row.variant, r.overrides)) continue;
        const auto v = std::find_if(cx.runs.begin(), cx.runs.end(), [&](const RunView& rv) {
          return fs::path(rv.run->dir).lexically_normal() == fs::path(r.dir).lexically_normal();
        });
        if (v == cx.runs.end() || !v->run->config) continue;
        sv.params = non_embedding_params(*v->run->config);
        for (const auto& [k, val] : v->cfg)
          if (k != sw.lr_key && !size_key(k)) sv.cfg[k] = val;
        break;
      }
      if (!std::isfinite(sv.params)) continue;
      double best = kNaN;
      for (std::size_t i = 0; i < row.lrs.size() && i < row.final_losses.size(); ++i)
        if (std::isfinite(row.final_losses[i]) && !(row.final_losses[i] >= best)) {
          best = row.final_losses[i];
          sv.best_lr = row.lrs[i];
        }
      out.push_back(std::move(sv));
    }
  std::vector<std::map<std::string, json>> cfgs;
  for (const auto& sv : out) cfgs.push_back(sv.cfg);
  const std::vector<std::string> labels = distinguishing_labels(cfgs, cx.keys);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i].label = labels[i].empty() ? out[i].row->label : labels[i];
  return out;
}

// ---- figures ----

// Where a curve of the chart's x key reaches `step`: the step itself, or the tokens of the step line
// of that step (of the last step line when none has it).
double x_at_step(const RunInput& r, const std::string& xkey, double step) {
  if (xkey == metric::step) return step;
  double x = kNaN;
  for (const auto& rec : r.metrics)
    if (!is_event(rec)) {
      x = number_or_nan(rec, xkey.c_str());
      if (number_or_nan(rec, metric::step) == step) return x;
    }
  return x;
}

struct Builder {
  const ReportInputs& in;
  const Context& cx;
  const ReportOptions& opt;
  std::vector<Figure> figures;
  std::vector<std::string> not_shown;

  std::string xlabel() const { return cx.xkey == metric::tokens ? "tokens" : "step"; }

  void add(Figure f, const std::string& missing_reason) {
    if (svg::drawable_points(f.chart) == 0) {
      not_shown.push_back(f.chart.title + ": " + missing_reason);
      return;
    }
    f.chart.id = "fig-" + f.name;
    figures.push_back(std::move(f));
  }

  // The runs of `cx` that have a curve of `key`, their curves, and their labels within the chart.
  struct ChartRuns {
    std::vector<const RunView*> runs;
    std::vector<Curve> curves;
    std::vector<std::string> labels;
  };
  ChartRuns chart_runs(const char* key, const Reduce& reduce = as_number) const {
    ChartRuns c;
    for (const auto& v : cx.runs) {
      Curve cv = curve(*v.run, cx.xkey, key, reduce);
      if (!any_finite(cv.y)) continue;
      c.runs.push_back(&v);
      c.curves.push_back(std::move(cv));
    }
    c.labels = chart_labels(c.runs, cx.keys);
    return c;
  }

  bool smoothed(const Curve& c) const { return opt.smoothing > 0 && c.y.size() >= kMinSmoothed; }

  // A run's training curve: smoothed (solid, labelled) over the raw one (faint, unlabelled), or the
  // raw one alone when it has too few points or smoothing is off. The labelled series is last.
  void add_training_curve(Figure& f, const RunView& v, const Curve& c, const std::string& label) const {
    svg::Series raw = line(label, c.x, c.y, v.color);
    raw.dash = v.dash;
    if (!smoothed(c)) {
      f.chart.series.push_back(std::move(raw));
      return;
    }
    raw.opacity = 0.25;
    raw.in_legend = false;
    f.chart.series.push_back(std::move(raw));
    svg::Series sm = line(label, c.x, ema(c.y, opt.smoothing, c.updated, c.x), v.color);
    sm.dash = v.dash;
    f.chart.series.push_back(std::move(sm));
  }

  std::string smoothing_text() const {
    return fmt::format("EMA, weight {} per step; raw faint", svg::compact_number(opt.smoothing));
  }

  void loss() {
    Figure f;
    f.name = "loss";
    f.chart.title = "Loss over training";
    f.chart.x.label = xlabel();
    f.chart.y = axis("loss", true);
    bool val = false, marked = false, smooth = false;
    const ChartRuns cr = chart_runs(metric::loss);
    for (std::size_t i = 0; i < cr.runs.size(); ++i) {
      const RunView& v = *cr.runs[i];
      const Curve& c = cr.curves[i];
      smooth = smooth || smoothed(c);
      add_training_curve(f, v, c, cr.labels[i]);
      if (failed_status(v.run->status)) {
        // The cross at the step where the run stopped, at that step's loss (the top edge when it
        // was not finite); the reason as its tooltip.
        const RunEnd end = run_end(*v.run);
        const double x = x_at_step(*v.run, cx.xkey, end.step);
        double y = kNaN;
        for (std::size_t k = 0; k < c.x.size(); ++k)
          if (c.x[k] == x) y = c.y[k];
        std::string what = fmt::format("{} at step {}", v.run->status, value_text(end.step));
        std::string detail = end.detail;
        for (const auto& sw : in.sweeps)
          for (const auto& sr : sw.runs)
            if (detail.empty() && sr.dir == v.run->dir) detail = sr.message;
        if (!detail.empty()) what += ": " + detail;
        f.chart.series.back().marks.push_back({x, y, what});
        marked = true;
      }
      const Curve vc = curve(*v.run, cx.xkey, metric::val_loss);
      if (any_finite(vc.y)) {
        svg::Series sv = line(cr.labels[i] + " (validation)", vc.x, vc.y, v.color);
        sv.dashed = true;
        sv.in_legend = false;
        f.chart.series.push_back(std::move(sv));
        val = true;
      }
    }
    f.chart.subtitle = "solid: training loss" + (smooth ? " (" + smoothing_text() + ")" : std::string()) +
                       (val ? "; dashed: validation loss" : "") +
                       (marked ? "; \u00d7 where a diverged run stopped" : "");
    f.caption = "Training loss (loss = cross-entropy + z-loss) of every logged step of each run" +
                std::string(smooth ? fmt::format(", smoothed by an exponential moving average (weight {} per "
                                                 "step, so beta^k between logged steps k apart; bias-corrected; "
                                                 "skipped steps left out; `normlab report "
                                                 "--smoothing 0` turns it off)",
                                                 svg::compact_number(opt.smoothing))
                               : "") +
                std::string(val ? ", and the validation loss (mean cross-entropy) at each evaluation" : "") +
                ". Hover a \u00d7 for why the run stopped.";
    if (!marked) f.caption.erase(f.caption.find(" Hover"));
    add(std::move(f), "no run has metrics with a loss");
  }

  void lr_figure(const std::string& name, const std::string& title, std::vector<LrGroup> groups,
                 const std::string& source, const std::string& loss_name = "final val loss") {
    Figure f;
    f.name = name;
    f.chart.title = title;
    f.chart.x = axis("learning rate", true);
    f.chart.y.label = loss_name;
    double lo = INFINITY, hi = -INFINITY;
    bool sens = false;
    for (const auto& g : groups)
      for (const auto& [lr, l] : g.points)
        if (std::isfinite(l) && l > 0) {
          lo = std::min(lo, l);
          hi = std::max(hi, l);
        }
    f.chart.y.log = hi / lo > 10;
    std::set<double> lrs;  // tick at the swept values when there are few
    for (const auto& g : groups) {
      for (const auto& p : g.points) lrs.insert(p.first);
      for (const auto& p : g.failures) lrs.insert(p.first);
    }
    if (lrs.size() <= 8) f.chart.x.ticks.assign(lrs.begin(), lrs.end());
    std::string rows;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      auto& g = groups[i];
      std::sort(g.points.begin(), g.points.end());
      svg::Series s;
      s.label = g.label + (std::isfinite(g.sensitivity)
                               ? fmt::format(" (sensitivity {})", svg::compact_number(g.sensitivity))
                               : "");
      s.color = svg::palette(i);
      s.markers = true;
      double best = kNaN, best_lr = kNaN;
      for (const auto& [lr, l] : g.points) {
        s.x.push_back(lr);
        s.y.push_back(l);
        if (std::isfinite(l) && !(l >= best)) {
          best = l;
          best_lr = lr;
        }
      }
      for (const auto& [lr, status] : g.failures) s.marks.push_back({lr, kNaN, status});
      sens = sens || std::isfinite(g.sensitivity);
      if (!std::isfinite(g.best_loss)) g.best_loss = best;
      const std::size_t n = std::max(g.points.size(), g.failures.size());
      rows += fmt::format(
          "<tr><td><span class=\"sw\" style=\"background:{}\"></span>{}</td><td>{}</td><td>{}</td><td>{}</td>"
          "<td{}>{} of {}</td></tr>\n",
          s.color, h(g.label), std::isfinite(g.sensitivity) ? h(svg::compact_number(g.sensitivity)) : "\u2014",
          std::isfinite(g.best_loss) ? fmt::format("{:.4f}", g.best_loss) : "\u2014",
          std::isfinite(best_lr) ? h(svg::compact_number(best_lr)) : "\u2014",
          g.failures.empty() ? "" : " class=\"bad\"", g.failures.size(), n);
      f.chart.series.push_back(std::move(s));
    }
    f.chart.subtitle = "one line per variant; \u00d7 at the top: a run that diverged or failed";
    f.caption = "The " + loss_name +
                (loss_name == "final val loss"
                     ? " (mean validation cross-entropy over train.eval_batches batches at the end of the run)"
                     : " (mean training loss over the last 20 updated steps; no run has a validation loss)") +
                " of each run against its peak learning rate (from " + source + ")." +
                (sens ? " The legend and the table give each variant's learning-rate sensitivity as the sweep "
                        "computed it from the final val loss."
                      : "");
    f.table_html = "<table class=\"lr\"><thead><tr><th>variant</th><th>sensitivity</th><th>best " + h(loss_name) +
                   "</th><th>at lr</th><th>diverged/failed</th></tr></thead><tbody>\n" + rows +
                   "</tbody></table>\n";
    bool any_failure = false;
    for (const auto& g : groups) any_failure = any_failure || !g.failures.empty();
    if (svg::drawable_points(f.chart) == 0 && any_failure) {
      // Every run failed: still worth showing the marks.
      f.chart.id = "fig-" + f.name;
      figures.push_back(std::move(f));
      return;
    }
    add(std::move(f), "no learning-rate sweep in the inputs");
  }

  void lr_sensitivity() {
    for (std::size_t si = 0; si < in.sweeps.size(); ++si) {
      const SweepInput& sw = in.sweeps[si];
      const std::string suffix = in.sweeps.size() > 1 ? "_" + std::to_string(si + 1) : "";
      lr_figure("lr_sensitivity" + suffix,
                "Final validation loss vs learning rate" + (in.sweeps.size() > 1 ? " \u2014 " + sw.name : ""),
                sweep_lr_groups(sw), sw.name + "/sweep.json");
    }
    if (in.sweeps.empty()) lr_from_runs();
  }

  // Lone runs that differ in optim.lr make a sweep of their own.
  void lr_from_runs() {
    std::vector<const RunView*> runs;
    std::set<double> lrs;
    for (const auto& v : cx.runs)
      if (v.run->sweep.empty() && v.cfg.contains("optim.lr") && !v.run->metrics.empty()) {
        runs.push_back(&v);
        lrs.insert(v.cfg.at("optim.lr").get<double>());
      }
    if (lrs.size() < 2) {
      not_shown.push_back("Final loss vs learning rate: no sweep, and fewer than two runs with different "
                          "learning rates");
      return;
    }
    // Final val loss; the train loss when no run has been evaluated.
    bool any_val = false;
    for (const RunView* v : runs) any_val = any_val || std::isfinite(run_end(*v->run).val_loss);
    const auto final_of = [&](const RunInput& r) {
      const RunEnd end = run_end(r);
      if (any_val) return end.val_loss;
      if (end.from_event) return end.train_loss;
      const json* last = last_step_line(r);
      return last ? number_or_nan(*last, metric::loss) : kNaN;
    };
    // One group per combination of everything but the learning rate that differs among these runs.
    std::vector<std::map<std::string, json>> cfgs;
    for (const RunView* v : runs) cfgs.push_back(v->cfg);
    const std::vector<std::string> labels = distinguishing_labels(cfgs, cx.keys, "optim.lr");
    std::vector<LrGroup> groups;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const RunView* v = runs[i];
      const std::string label = labels[i].empty() ? "all runs" : labels[i];
      auto it = std::find_if(groups.begin(), groups.end(), [&](const LrGroup& g) { return g.label == label; });
      if (it == groups.end()) {
        groups.emplace_back();
        groups.back().label = label;
        it = groups.end() - 1;
      }
      const double lr = v->cfg.at("optim.lr").get<double>();
      it->points.emplace_back(lr, failed_status(v->run->status) ? kNaN : final_of(*v->run));
      if (failed_status(v->run->status)) it->failures.emplace_back(lr, v->run->status);
    }
    lr_figure("lr_sensitivity", any_val ? "Final validation loss vs learning rate" : "Final train loss vs learning rate",
              groups, any_val ? "the last evaluation of each run" : "each run's train loss",
              any_val ? "final val loss" : "final train loss");
  }

  // One line per run over training: a metric of every record that has it.
  void over_training(const std::string& name, const std::string& title, const char* key, const std::string& ylabel,
                     bool log, const Reduce& reduce, const std::string& caption, const std::string& reason,
                     bool smooth = false) {
    Figure f;
    f.name = name;
    f.chart.title = title;
    f.chart.x.label = xlabel();
    f.chart.y = axis(ylabel, log);
    const ChartRuns cr = chart_runs(key, reduce);
    bool any_smoothed = false;
    for (std::size_t i = 0; i < cr.runs.size(); ++i) {
      if (smooth) {
        add_training_curve(f, *cr.runs[i], cr.curves[i], cr.labels[i]);
        any_smoothed = any_smoothed || smoothed(cr.curves[i]);
      } else {
        svg::Series s = line(cr.labels[i], cr.curves[i].x, cr.curves[i].y, cr.runs[i]->color);
        s.dash = cr.runs[i]->dash;
        f.chart.series.push_back(std::move(s));
      }
    }
    if (any_smoothed) f.chart.subtitle = smoothing_text();
    f.caption = caption;
    add(std::move(f), reason);
  }

  // One line per run from its last diagnostics record: an array by layer or by depth.
  void by_depth_runs(const std::string& name, const std::string& title, const char* key, const std::string& xlabel_,
                     const std::string& ylabel, double x_per_index, const std::string& caption) {
    Figure f;
    f.name = name;
    f.chart.title = title;
    f.chart.x = axis(xlabel_, false, true);
    f.chart.y = axis(ylabel, true);
    std::set<double> steps;
    std::vector<const RunView*> runs;
    for (const auto& v : cx.runs)
      if (last_with_array(*v.run, key)) runs.push_back(&v);
    const std::vector<std::string> labels = chart_labels(runs, cx.keys);
    for (std::size_t ri = 0; ri < runs.size(); ++ri) {
      const RunView& v = *runs[ri];
      const json* rec = last_with_array(*v.run, key);
      svg::Series s = line(labels[ri], {}, array_values(rec->at(key)), v.color);
      s.dash = v.dash;
      for (std::size_t i = 0; i < s.y.size(); ++i) s.x.push_back(i * x_per_index);
      s.markers = s.y.size() <= 24;
      steps.insert(number_or_nan(*rec, metric::step));
      f.chart.series.push_back(std::move(s));
    }
    f.chart.subtitle = steps.size() == 1 ? fmt::format("last diagnostics record (step {})", value_text(*steps.begin()))
                                         : "last diagnostics record of each run";
    f.caption = caption;
    add(std::move(f), "no run has diagnostics (train with --set diag.interval=N)");
  }

  // One line per gradflow result.
  void by_depth_gradflow(const std::string& name, const std::string& title,
                         std::vector<double> GradflowResult::*field, const std::string& xlabel_,
                         const std::string& ylabel, const std::string& caption) {
    Figure f;
    f.name = name;
    f.chart.title = title;
    f.chart.x = axis(xlabel_, false, true);
    f.chart.y = axis(ylabel, true);
    std::size_t n = 0;
    for (const auto& g : in.gradflows) {
      for (const auto& r : g.results) {
        const auto& ys = r.*field;
        svg::Series s = line(in.gradflows.size() > 1 ? fs::path(g.dir).filename().string() + ": " + r.label : r.label,
                             {}, ys, svg::palette(n++));
        for (std::size_t i = 0; i < ys.size(); ++i) s.x.push_back(static_cast<double>(i));
        s.markers = ys.size() <= 24;
        f.chart.series.push_back(std::move(s));
      }
    }
    std::string settings;
    for (const auto& g : in.gradflows)
      for (const auto& [k, v] : g.settings.items())
        if (!v.is_structured()) settings += (settings.empty() ? "" : ", ") + k + "=" + value_text(v);
    if (settings.size() > 110) settings = settings.substr(0, 108) + "\u2026";
    f.chart.subtitle = settings.empty() ? "at initialization" : "at initialization; " + settings;
    f.caption = caption;
    add(std::move(f), "no gradflow study in the inputs");
  }

  // Learning-rate sensitivity and the best learning rate against the non-embedding parameter
  // count: one line per variant over sweeps of different model sizes.
  void scaling() {
    const std::vector<SizedVariant> svs = sized_variants(in, cx);
    if (!several_sizes(svs)) {
      not_shown.push_back("Learning-rate sensitivity vs parameters: needs sweeps of at least two model sizes");
      return;
    }
    std::vector<std::string> labels;  // lines, in first-seen order
    for (const auto& sv : svs)
      if (std::find(labels.begin(), labels.end(), sv.label) == labels.end()) labels.push_back(sv.label);
    const auto chart = [&](const std::string& name, const std::string& title, const std::string& ylabel,
                           bool ylog, double SizedVariant::*field_or_null, const std::string& caption) {
      Figure f;
      f.name = name;
      f.chart.title = title;
      f.chart.x = axis("non-embedding parameters", true);
      f.chart.y = axis(ylabel, ylog);
      for (std::size_t li = 0; li < labels.size(); ++li) {
        std::vector<std::pair<double, double>> pts;
        for (const auto& sv : svs)
          if (sv.label == labels[li])
            pts.emplace_back(sv.params, field_or_null ? sv.*field_or_null : sv.row->sensitivity);
        std::sort(pts.begin(), pts.end());
        svg::Series s;
        s.label = labels[li];
        s.color = svg::palette(li);
        s.markers = true;
        for (const auto& [x, y] : pts) {
          s.x.push_back(x);
          s.y.push_back(y);
        }
        f.chart.series.push_back(std::move(s));
      }
      f.chart.subtitle = "one line per variant; one point per sweep (model size)";
      f.caption = caption;
      return f;
    };
    std::string rows;
    for (const auto& sv : svs) {
      int diverged = 0;
      for (double l : sv.row->final_losses) diverged += std::isfinite(l) ? 0 : 1;
      rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} of {}</td></tr>\n",
                          h(sv.label), h(sv.sweep->name), h(svg::compact_number(sv.params)),
                          std::isfinite(sv.row->sensitivity) ? fmt::format("{:.4f}", sv.row->sensitivity) : "\u2014",
                          std::isfinite(sv.row->best_loss) ? fmt::format("{:.4f}", sv.row->best_loss) : "\u2014",
                          std::isfinite(sv.best_lr) ? h(svg::compact_number(sv.best_lr)) : "\u2014", diverged,
                          sv.row->final_losses.size());
    }
    Figure fs_ = chart("scaling_sensitivity", "Learning-rate sensitivity vs non-embedding parameters",
                       "learning-rate sensitivity", false, nullptr,
                       "Each sweep variant's learning-rate sensitivity (sweep.json: the mean over the learning-rate "
                       "grid of min(final loss, initial loss) minus the best final loss; a diverged run counts with "
                       "its initial loss) at the non-embedding parameter count of its model (all parameters but "
                       "the embedding group). Variants that differ only in model size form one line (Wortsman et "
                       "al. 2023, figure 1).");
    fs_.table_html = "<table class=\"lr\"><thead><tr><th>variant</th><th>sweep</th><th>non-embedding params</th>"
                     "<th>sensitivity</th><th>best final loss</th><th>at lr</th><th>no final loss</th></tr></thead>"
                     "<tbody>\n" + rows + "</tbody></table>\n";
    add(std::move(fs_), "no sensitivity in the sweeps");
    add(chart("scaling_best_lr", "Best learning rate vs non-embedding parameters", "learning rate of the best final loss",
              true, &SizedVariant::best_lr,
              "The learning rate of each sweep variant's lowest final loss, against the non-embedding parameter "
              "count of its model: how the optimal learning rate moves with size."),
        "no sweep variant has a finite final loss");
  }

  // The largest attention logit at the end of each run against its learning rate: one line per
  // sweep variant (and model size).
  void attn_logit_vs_lr() {
    Figure f;
    f.name = "attn_logit_vs_lr";
    f.chart.title = "Max attention logit at the end vs learning rate";
    f.chart.x = axis("learning rate", true);
    f.chart.y = axis("max attention logit (last diagnostics record)", true);
    const std::vector<SizedVariant> svs = sized_variants(in, cx);
    const bool sized = several_sizes(svs);
    std::size_t li = 0;
    for (const auto& sv : svs) {
      svg::Series s;
      s.label = sv.label + (sized ? ", " + svg::compact_number(sv.params) + " params" : "");
      if (in.sweeps.size() > 1 && !sized) s.label += " (" + sv.sweep->name + ")";
      s.color = svg::palette(li);
      s.dash = svg::dash_pattern(li);
      s.markers = true;
      std::vector<std::pair<double, double>> pts;
      for (const auto& r : sv.sweep->runs)
        if (variant_matches(sv.row->variant, r.overrides) && r.overrides.contains(sv.sweep->lr_key))
          pts.emplace_back(as_double(r.overrides[sv.sweep->lr_key]), r.max_attn_logit);
      std::sort(pts.begin(), pts.end());
      for (const auto& [x, y] : pts) {
        s.x.push_back(x);
        s.y.push_back(y);
      }
      ++li;
      f.chart.series.push_back(std::move(s));
    }
    f.chart.subtitle = "one line per sweep variant; a gap: no finite value (the run stopped before its diagnostics, or they were not finite)";
    f.caption = "The largest pre-softmax attention logit over layers and heads in each run's last diagnostics record "
                "(sweep.json's max_attn_logit), against the run's peak learning rate. Logits that grow with the "
                "learning rate, and more so in larger models, are the attention-logit growth instability QK-Norm "
                "removes (Dehghani et al. 2023; Wortsman et al. 2023).";
    add(std::move(f), "no sweep run has diagnostics (sweep with --set diag.interval=N)");
  }

  void all() {
    loss();
    lr_sensitivity();
    scaling();
    attn_logit_vs_lr();
    by_depth_gradflow("grad_norm_layers_gradflow", "Gradient norm by layer (gradflow study)",
                      &GradflowResult::grad_norm_layer, "layer", "gradient norm",
                      "L2 norm of the loss gradient with respect to each block's parameters, per layer, at "
                      "initialization or after the study's training steps (gradflow.json).");
    by_depth_runs("grad_norm_layers_runs", "Gradient norm by layer (runs)", metric::grad_norm_block, "layer",
                  "gradient norm", 1.0,
                  "L2 norm of the gradient of each block's parameters (grad_norm_block) in the last "
                  "diagnostics record of each run.");
    by_depth_gradflow("resid_rms_gradflow", "Residual RMS by depth (gradflow study)", &GradflowResult::hidden_rms,
                      "depth (0 = embedding, l = after block l)", "hidden-state RMS",
                      "Root mean square of the hidden state after the embedding and after each block, at "
                      "initialization (gradflow.json).");
    by_depth_runs("resid_rms_runs", "Residual RMS by depth (runs)", metric::resid_rms,
                  "depth in blocks (0 = embedding, l - 0.5 = after block l's attention, l = after block l)",
                  "residual RMS", 0.5,
                  "Root mean square of the residual stream at each sublayer boundary (resid_rms) in the last "
                  "diagnostics record of each run.");
    over_training("grad_norm", "Gradient norm over training", metric::grad_norm, "global gradient norm", true, as_number,
                  "Global L2 norm of the gradient before clipping, at each logged step (smoothed like the "
                  "loss).",
                  "no run has metrics with grad_norm", true);
    over_training("attn_max_logit", "Max attention logit over training", metric::attn_max_logit,
                  "max attention logit (over layers)", true, finite_max,
                  "Largest pre-softmax attention logit over all layers and heads (max of attn_max_logit) at "
                  "each diagnostics step. Growth without bound is the attention-logit instability that "
                  "QK-Norm and soft-capping address.",
                  "no run has diagnostics (train with --set diag.interval=N)");
    over_training("log_z", "Output log Z over training", metric::log_z_mean, "mean log Z", false, as_number,
                  "Mean log-partition function log Z = logsumexp(logits) of the output softmax (log_z_mean). "
                  "z-loss pushes it toward 0; drift signals output-logit growth.",
                  "no run has metrics with log_z_mean");
  }
};

}  // namespace

Figures build_figures(const ReportInputs& in, const Context& cx, const ReportOptions& opt) {
  Builder b{in, cx, opt, {}, {}};
  b.all();
  return {std::move(b.figures), std::move(b.not_shown)};
}

}  // namespace normlab::report
