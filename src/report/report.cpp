#include "report/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string h(std::string_view s) { return svg::escape(s); }

// Keys whose differences say nothing about the result: left out of series labels (still shown,
// and highlighted, in the config table).
bool label_worthy(const std::string& key) {
  static const std::set<std::string> kNoise = {"train.threads",       "train.keep_checkpoints",
                                               "train.checkpoint_interval", "train.log_interval",
                                               "train.eval_interval", "train.eval_batches",
                                               "diag.interval",       "diag.per_head"};
  return !kNoise.contains(key);
}

// Columns always shown in the config table (when a run has a config), besides the differing ones.
const std::set<std::string>& key_columns() {
  static const std::set<std::string> k = {"model.placement", "model.norm",     "model.n_layer",
                                          "model.d_model",   "model.qk_norm",  "optim.lr",
                                          "train.steps",     "train.z_loss",   "model.attn_softcap",
                                          "model.final_softcap"};
  return k;
}

std::string value_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number()) return svg::compact_number(v.get<double>());
  if (v.is_null()) return "\u2014";
  return v.dump();
}

std::string short_key(const std::string& key) { return key.substr(key.find('.') + 1); }

// One run as the figures see it: its label and color, and its config as "section.key" -> value.
struct RunView {
  const RunInput* run = nullptr;
  std::string label, color;
  std::map<std::string, json> cfg;  // empty without a config
};

struct Context {
  std::vector<std::string> keys;       // every config key, in the order of the structs
  std::vector<std::string> differing;  // keys with at least two distinct values among the runs
  std::vector<RunView> runs;
  std::string xkey = metric::step;           // "tokens" when the runs differ in tokens per step
};

std::string label_from(const std::map<std::string, json>& cfg, const std::vector<std::string>& keys) {
  std::set<std::string> shorts;
  bool clash = false;
  for (const auto& k : keys) clash = !shorts.insert(short_key(k)).second || clash;
  std::string out;
  for (const auto& k : keys) {
    const auto it = cfg.find(k);
    if (it == cfg.end()) continue;
    out += (out.empty() ? "" : ", ") + (clash ? k : short_key(k)) + "=" + value_text(it->second);
  }
  return out;
}

// Label keys: the differing ones worth naming, placement first.
std::vector<std::string> label_keys(const Context& cx, const std::string& except = "") {
  std::vector<std::string> out;
  for (const auto& k : cx.differing)
    if (label_worthy(k) && k != except) out.push_back(k);
  std::stable_partition(out.begin(), out.end(), [](const std::string& k) { return k == "model.placement"; });
  return out;
}

Context make_context(const ReportInputs& in) {
  Context cx;
  cx.keys = config_keys();
  for (std::size_t i = 0; i < in.runs.size(); ++i) {
    RunView v;
    v.run = &in.runs[i];
    v.color = svg::palette(i);
    if (v.run->config) {
      const json j = config_to_json(*v.run->config);
      for (const auto& k : cx.keys) {
        const auto dot = k.find('.');
        const std::string sec = k.substr(0, dot), name = k.substr(dot + 1);
        if (j.contains(sec) && j[sec].contains(name)) v.cfg[k] = j[sec][name];
      }
    }
    cx.runs.push_back(std::move(v));
  }
  for (const auto& k : cx.keys) {
    std::vector<json> seen;
    for (const auto& v : cx.runs) {
      const auto it = v.cfg.find(k);
      if (it != v.cfg.end() && std::find(seen.begin(), seen.end(), it->second) == seen.end())
        seen.push_back(it->second);
    }
    if (seen.size() > 1) cx.differing.push_back(k);
  }
  const auto lk = label_keys(cx);
  std::map<std::string, int> count;
  for (auto& v : cx.runs) {
    v.label = v.cfg.empty() || lk.empty() ? v.run->name : label_from(v.cfg, lk);
    ++count[v.label];
  }
  for (auto& v : cx.runs)
    if (count[v.label] > 1 && v.label != v.run->name) v.label = v.run->name + " (" + v.label + ")";
  for (const char* k : {"train.batch_size", "train.grad_accum", "model.seq_len"})
    if (std::find(cx.differing.begin(), cx.differing.end(), k) != cx.differing.end()) cx.xkey = metric::tokens;
  return cx;
}

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

bool failed_status(const std::string& s) { return s == "diverged" || s == "failed"; }

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

// ---- figures ----

struct Builder {
  const ReportInputs& in;
  Context cx;
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

  // One line per variant over the learning rate: final loss, failed runs marked at the top edge.
  struct LrGroup {
    std::string label;
    std::vector<std::pair<double, double>> points;          // (lr, final loss); NaN = none
    std::vector<std::pair<double, std::string>> failures;   // (lr, status)
    double sensitivity = kNaN, best_loss = kNaN;
  };

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
      const std::string suffix = in.sweeps.size() > 1 ? "_" + std::to_string(si + 1) : "";
      lr_figure("lr_sensitivity" + suffix,
                "Final loss vs learning rate" + (in.sweeps.size() > 1 ? " \u2014 " + sw.name : ""), groups,
                sw.name + "/sweep.json");
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

std::string number_cell(double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : "\u2014"; }

std::string last_number(const RunInput& r, const char* key) {
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it)
    if (it->contains(key)) return number_cell(number_or_nan(*it, key));
  return "\u2014";
}

std::string runs_table(const Context& cx) {
  std::vector<std::string> cols;
  const std::set<std::string> diff(cx.differing.begin(), cx.differing.end());
  // What differs first (placement first of all), then the usual suspects.
  for (const auto& k : cx.keys)
    if (diff.contains(k)) cols.push_back(k);
  std::stable_partition(cols.begin(), cols.end(), [](const std::string& k) { return k == "model.placement"; });
  for (const auto& k : cx.keys)
    if (key_columns().contains(k) && !diff.contains(k)) cols.push_back(k);
  bool any_cfg = false;
  for (const auto& v : cx.runs) any_cfg = any_cfg || !v.cfg.empty();
  if (!any_cfg) cols.clear();
  std::string o = "<div class=\"scroll\"><table class=\"runs\"><thead><tr><th>run</th><th>status</th><th>steps</th>"
                  "<th>final loss</th><th>final val loss</th>";
  for (const auto& k : cols)
    o += fmt::format("<th{}>{}</th>", diff.contains(k) ? " class=\"diff\" title=\"differs between runs\"" : "", h(k));
  o += "</tr></thead><tbody>\n";
  for (const auto& v : cx.runs) {
    const RunInput& r = *v.run;
    const std::string steps = r.metrics.empty() ? "\u2014" : value_text(r.metrics.back().value(metric::step, json()));
    o += fmt::format(
        "<tr><td title=\"{}\"><span class=\"sw\" style=\"background:{}\"></span>{}</td><td class=\"st {}\">{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td>",
        h(r.dir), v.color, h(r.name), h(r.status), r.status.empty() ? "\u2014" : h(r.status), h(steps),
        r.metrics.empty() ? "\u2014" : number_cell(number_or_nan(r.metrics.back(), metric::loss)),
        last_number(r, metric::val_loss));
    for (const auto& k : cols) {
      const auto it = v.cfg.find(k);
      o += fmt::format("<td{}>{}</td>", diff.contains(k) ? " class=\"diff\"" : "",
                       it == v.cfg.end() ? "\u2014" : h(value_text(it->second)));
    }
    o += "</tr>\n";
  }
  o += "</tbody></table></div>\n";
  std::string full;
  for (const auto& v : cx.runs)
    if (v.run->config)
      full += fmt::format("<details class=\"cfg\"><summary>{}</summary><pre>{}</pre></details>\n", h(v.run->name),
                          h(dump_config_toml(*v.run->config)));
  if (!full.empty())
    o += "<details class=\"all\"><summary>Full configuration of each run</summary>\n" + full + "</details>\n";
  return o;
}

std::string inputs_table(const ReportInputs& in) {
  std::string o = "<table class=\"inputs\"><thead><tr><th>directory</th><th>kind</th><th>contents</th></tr>"
                  "</thead><tbody>\n";
  for (const auto& s : in.sweeps) {
    std::size_t failed = 0;
    for (const auto& r : s.runs) failed += failed_status(r.status);
    std::string grid;
    for (const auto& [k, v] : s.grid.items())
      grid += (grid.empty() ? "" : ", ") + k + " (" + std::to_string(v.is_array() ? v.size() : 1) + ")";
    o += fmt::format("<tr><td>{}</td><td>sweep</td><td>{} runs ({} diverged or failed); grid: {}</td></tr>\n", h(s.dir),
                     s.runs.size(), failed, h(grid));
  }
  for (const auto& g : in.gradflows)
    o += fmt::format("<tr><td>{}</td><td>gradflow</td><td>{} results</td></tr>\n", h(g.dir), g.results.size());
  for (const auto& r : in.runs) {
    if (!r.sweep.empty()) continue;
    std::size_t diag = 0;
    for (const auto& rec : r.metrics) diag += rec.contains(metric::grad_norm_block);
    o += fmt::format("<tr><td>{}</td><td>run</td><td>{} records{}{}</td></tr>\n", h(r.dir), r.metrics.size(),
                     diag ? fmt::format(", {} with diagnostics", diag) : "", r.config ? "" : ", no usable config");
  }
  return o + "</tbody></table>\n";
}

constexpr const char* kStyle = R"(
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222;
       background: #f7f7f5; margin: 0; }
main { max-width: 1080px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.meta { color: #666; margin: 0 0 16px; }
nav ul { columns: 2; padding-left: 20px; margin: 6px 0; }
figure { background: #fff; border: 1px solid #ddd; border-radius: 6px; margin: 0 0 22px; padding: 10px 12px 12px; }
figure svg.chart { display: block; max-width: 100%; height: auto; }
figcaption { color: #444; font-size: 13px; margin-top: 6px; }
figcaption a { color: #3b6ea5; }
table { border-collapse: collapse; font-size: 13px; background: #fff; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; white-space: nowrap; }
th { background: #f0f0ee; font-weight: 600; }
th.diff { background: #ffe8a3; }
td.diff { background: #fff5d1; font-weight: 600; }
td.bad, td.st.diverged, td.st.failed { color: #b3261e; font-weight: 600; }
td.st.done { color: #2d6a2e; }
.scroll { overflow-x: auto; }
span.sw { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
details.all { margin-top: 10px; }
details.cfg { margin: 4px 0 4px 16px; }
details pre { background: #fff; border: 1px solid #ddd; padding: 8px; font-size: 12px; overflow-x: auto; }
ul.notes li { color: #555; }
)";

// Catches script errors from the start; the last script counts the charts that drew something
// (a series path of non-zero length, or a dot) into data-charts, and the errors into data-errors,
// so that a headless browser can check the page.
constexpr const char* kHeadScript =
    "window.__normlabErrors = [];\n"
    "window.addEventListener('error', function (e) { window.__normlabErrors.push(String(e.message || e)); });\n";
constexpr const char* kBodyScript = R"(
(function () {
  function check() {
    var n = 0;
    try {
      var charts = document.querySelectorAll('svg.chart');
      for (var i = 0; i < charts.length; i++) {
        var drawn = charts[i].querySelector('g.series circle') !== null;
        var paths = charts[i].querySelectorAll('g.series path:not(.mark)');
        for (var j = 0; j < paths.length && !drawn; j++) drawn = paths[j].getTotalLength() > 0;
        if (drawn) n++;
      }
    } catch (e) {
      window.__normlabErrors.push(String(e));
    }
    document.body.dataset.charts = String(n);
    document.body.dataset.errors = window.__normlabErrors.join('\n');
  }
  check();
  window.addEventListener('load', check);
})();
)";

}  // namespace

Report build_report(const ReportInputs& in, const std::string& title, const std::string& figures_link) {
  Builder b{in, make_context(in), {}, {}};
  b.all();
  Report rep;
  rep.title = title;
  rep.figures = std::move(b.figures);
  rep.not_shown = std::move(b.not_shown);

  std::string o = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  o += fmt::format("<title>{}</title>\n<script>\n{}</script>\n<style>{}</style>\n</head>\n<body>\n<main>\n", h(title),
                   kHeadScript, kStyle);
  o += fmt::format("<h1>{}</h1>\n<p class=\"meta\">normlab report of {} run{}, {} sweep{} and {} gradflow stud{}</p>\n",
                   h(title), in.runs.size(), in.runs.size() == 1 ? "" : "s", in.sweeps.size(),
                   in.sweeps.size() == 1 ? "" : "s", in.gradflows.size(), in.gradflows.size() == 1 ? "y" : "ies");
  o += "<nav><strong>Contents</strong><ul>\n<li><a href=\"#inputs\">Inputs</a></li>\n";
  for (const auto& f : rep.figures) o += fmt::format("<li><a href=\"#{}\">{}</a></li>\n", h(f.chart.id), h(f.chart.title));
  if (!rep.not_shown.empty() || !in.notes.empty()) o += "<li><a href=\"#not-shown\">Not shown</a></li>\n";
  if (!in.runs.empty()) o += "<li><a href=\"#runs\">Runs and configurations</a></li>\n";
  o += "</ul></nav>\n";
  o += "<section id=\"inputs\"><h2>Inputs</h2>\n" + inputs_table(in) + "</section>\n";
  o += "<section id=\"figures\"><h2>Figures</h2>\n";
  if (rep.figures.empty()) o += "<p>No input holds data for any figure.</p>\n";
  for (const auto& f : rep.figures) {
    o += "<figure>\n" + svg::render(f.chart, false);
    o += fmt::format("<figcaption>{} <a href=\"{}/{}.svg\">SVG</a></figcaption>\n{}</figure>\n", h(f.caption),
                     h(figures_link), h(f.name), f.table_html);
  }
  o += "</section>\n";
  if (!rep.not_shown.empty() || !in.notes.empty()) {
    o += "<section id=\"not-shown\"><h2>Not shown</h2>\n<ul class=\"notes\">\n";
    for (const auto& s : rep.not_shown) o += "<li>" + h(s) + "</li>\n";
    for (const auto& s : in.notes) o += "<li>" + h(s) + "</li>\n";
    o += "</ul></section>\n";
  }
  if (!in.runs.empty()) {
    const Context& cx = b.cx;
    o += "<section id=\"runs\"><h2>Runs and configurations</h2>\n";
    if (!cx.differing.empty())
      o += "<p>Highlighted columns differ between runs; series in the figures are labelled by them.</p>\n";
    o += runs_table(cx) + "</section>\n";
  }
  o += fmt::format("</main>\n<script>{}</script>\n</body>\n</html>\n", kBodyScript);
  rep.html = std::move(o);
  return rep;
}

std::string figures_dir_for(const std::string& out_html) {
  fs::path p(out_html);
  p.replace_extension();
  return p.string() + "_figures";
}

std::vector<std::string> write_report(const Report& report, const std::string& out_html) {
  const auto write = [](const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) throw Error(fmt::format("cannot write {}", path.string()));
  };
  const fs::path html(out_html);
  const fs::path figs(figures_dir_for(out_html));
  std::error_code ec;
  if (html.has_parent_path()) fs::create_directories(html.parent_path(), ec);
  fs::create_directories(figs, ec);
  if (!fs::is_directory(figs)) throw Error(fmt::format("cannot create {}", figs.string()));
  std::vector<std::string> written;
  write(html, report.html);
  written.push_back(html.string());
  for (const auto& f : report.figures) {
    const fs::path p = figs / (f.name + ".svg");
    write(p, svg::render(f.chart, true));
    written.push_back(p.string());
  }
  return written;
}

}  // namespace normlab::report
