// The figures of the HTML report: each built from the runs, sweeps and gradflow studies that have
// its data, or listed as not shown with the reason.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "normlab/metrics.h"
#include "report/figures.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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

// (x, y) of every record that has `key`; a null value becomes a gap.
std::pair<std::vector<double>, std::vector<double>> curve(const RunInput& r, const std::string& xkey,
                                                          const char* key, const Reduce& reduce = as_number) {
  std::vector<double> xs, ys;
  for (const auto& rec : r.metrics) {
    const auto it = rec.find(key);
    if (it == rec.end()) continue;
    xs.push_back(number_or_nan(rec, xkey.c_str()));
    ys.push_back(reduce(*it));
  }
  return {xs, ys};
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
std::vector<LrGroup> sweep_lr_groups(const SweepInput& sw) {
  std::vector<LrGroup> groups;
  const auto matches = [&](const json& variant, const json& overrides) {
    for (const auto& [k, val] : variant.items())
      if (!overrides.contains(k) || !same_value(overrides[k], val)) return false;
    return true;
  };
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
        LrGroup g;
        for (const auto& [k, val] : variant.items())
          g.label += (g.label.empty() ? "" : ", ") + short_key(k) + "=" + value_text(val);
        if (g.label.empty()) g.label = sw.name;
        groups.push_back(std::move(g));
      }
    }
    for (const auto& r : sw.runs) {
      json variant = r.overrides.is_object() ? r.overrides : json::object();
      variant.erase(sw.lr_key);
      const std::size_t gi = std::find(variants.begin(), variants.end(), variant) - variants.begin();
      groups[gi].points.emplace_back(lr_of(r), failed_status(r.status) ? kNaN : r.final_loss);
    }
  }
  for (const auto& r : sw.runs) {
    if (!failed_status(r.status)) continue;
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      if (matches(variants[gi], r.overrides))
        groups[gi].failures.emplace_back(lr_of(r), r.message.empty() ? r.status : r.status + ": " + r.message);
  }
  return groups;
}

// ---- figures ----

struct Builder {
  const ReportInputs& in;
  const Context& cx;
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

  void loss() {
    Figure f;
    f.name = "loss";
    f.chart.title = "Loss over training";
    f.chart.x.label = xlabel();
    f.chart.y = axis("loss", true);
    bool val = false, marked = false;
    for (const auto& v : cx.runs) {
      auto [x, y] = curve(*v.run, cx.xkey, metric::loss);
      if (x.empty()) continue;
      svg::Series s = line(v.label, x, y, v.color);
      if (failed_status(v.run->status)) {
        std::size_t i = y.size();
        while (i > 0 && !std::isfinite(y[i - 1])) --i;
        const double last_x = number_or_nan(v.run->metrics.back(), cx.xkey.c_str());
        const std::string what = fmt::format("{} at {} {}", v.run->status, xlabel(), value_text(last_x));
        s.marks.push_back(i > 0 ? svg::Mark{x[i - 1], y[i - 1], what} : svg::Mark{last_x, kNaN, what});
        marked = true;
      }
      f.chart.series.push_back(std::move(s));
      auto [vx, vy] = curve(*v.run, cx.xkey, metric::val_loss);
      if (any_finite(vy)) {
        svg::Series sv = line(v.label + " (validation)", vx, vy, v.color);
        sv.dashed = true;
        sv.in_legend = false;
        f.chart.series.push_back(std::move(sv));
        val = true;
      }
    }
    f.chart.subtitle = std::string(val ? "solid: training loss, dashed: validation loss" : "training loss") +
                       (marked ? "; \u00d7 last finite value of a diverged run" : "");
    f.caption = "Training loss (loss = cross-entropy + z-loss) of every logged step of each run" +
                std::string(val ? ", and the validation loss at each evaluation" : "") + ".";
    add(std::move(f), "no run has metrics with a loss");
  }

  void lr_figure(const std::string& name, const std::string& title, std::vector<LrGroup> groups,
                 const std::string& source) {
    Figure f;
    f.name = name;
    f.chart.title = title;
    f.chart.x = axis("learning rate", true);
    f.chart.y.label = "final loss";
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
    f.caption = "Final loss of each run against its peak learning rate (from " + source + ")." +
                (sens ? " The legend and the table give each variant's learning-rate sensitivity as the sweep "
                        "computed it."
                      : "");
    f.table_html = "<table class=\"lr\"><thead><tr><th>variant</th><th>sensitivity</th><th>best final loss</th>"
                   "<th>at lr</th><th>diverged/failed</th></tr></thead><tbody>\n" +
                   rows + "</tbody></table>\n";
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
                "Final loss vs learning rate" + (in.sweeps.size() > 1 ? " \u2014 " + sw.name : ""),
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
    const auto keys = label_keys(cx, "optim.lr");
    std::vector<LrGroup> groups;
    for (const RunView* v : runs) {
      std::string label = label_from(v->cfg, keys);
      if (label.empty()) label = "all runs";
      auto it = std::find_if(groups.begin(), groups.end(), [&](const LrGroup& g) { return g.label == label; });
      if (it == groups.end()) {
        groups.emplace_back();
        groups.back().label = label;
        it = groups.end() - 1;
      }
      const double lr = v->cfg.at("optim.lr").get<double>();
      const double final_loss = number_or_nan(v->run->metrics.back(), metric::loss);
      it->points.emplace_back(lr, failed_status(v->run->status) ? kNaN : final_loss);
      if (failed_status(v->run->status)) it->failures.emplace_back(lr, v->run->status);
    }
    lr_figure("lr_sensitivity", "Final loss vs learning rate", groups, "last logged loss of each run");
  }

  // One line per run over training: a metric of every record that has it.
  void over_training(const std::string& name, const std::string& title, const char* key, const std::string& ylabel,
                     bool log, const Reduce& reduce, const std::string& caption, const std::string& reason) {
    Figure f;
    f.name = name;
    f.chart.title = title;
    f.chart.x.label = xlabel();
    f.chart.y = axis(ylabel, log);
    for (const auto& v : cx.runs) {
      auto [x, y] = curve(*v.run, cx.xkey, key, reduce);
      if (any_finite(y)) f.chart.series.push_back(line(v.label, x, y, v.color));
    }
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
    for (const auto& v : cx.runs) {
      const json* rec = last_with_array(*v.run, key);
      if (!rec) continue;
      svg::Series s = line(v.label, {}, array_values(rec->at(key)), v.color);
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

  void all() {
    loss();
    lr_sensitivity();
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
                  "Global L2 norm of the gradient before clipping, at each logged step.",
                  "no run has metrics with grad_norm");
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

Figures build_figures(const ReportInputs& in, const Context& cx) {
  Builder b{in, cx, {}, {}};
  b.all();
  return {std::move(b.figures), std::move(b.not_shown)};
}

}  // namespace normlab::report
