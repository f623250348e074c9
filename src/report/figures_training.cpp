// The training-curve figures of the report: the loss of every run over training (smoothed over the
// raw curve, the validation loss dashed, where a diverged run stopped marked with why; runs that
// differ only in train.seed as their mean with a min-max band) and the other
// metrics logged over training (the gradient norm, the max attention logit, log Z).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "normlab/metrics.h"
#include "report/figures.h"
#include "report/figures_detail.h"

namespace normlab::report::figures_detail {

namespace {

constexpr std::size_t kMinSmoothed = 10;  // fewer logged points than this are drawn raw

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

struct TrainingFigures : Builder {
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

  // Runs whose configs differ only in train.seed (`compare --seeds`, `sweep --seeds`), none of
  // them failed: groups of indices into cr (a lone run is a group of one).
  static std::vector<std::vector<std::size_t>> seed_groups(const ChartRuns& cr) {
    auto without_seed = [](std::map<std::string, nlohmann::json> c) {
      c.erase("train.seed");
      return c;
    };
    std::vector<std::vector<std::size_t>> groups;
    std::vector<bool> used(cr.runs.size(), false);
    for (std::size_t i = 0; i < cr.runs.size(); ++i) {
      if (used[i]) continue;
      groups.push_back({i});
      const RunView& a = *cr.runs[i];
      if (a.cfg.empty() || !a.cfg.count("train.seed") || failed_status(a.run->status)) continue;
      for (std::size_t j = i + 1; j < cr.runs.size(); ++j) {
        const RunView& b = *cr.runs[j];
        if (used[j] || b.cfg.empty() || failed_status(b.run->status) ||
            without_seed(b.cfg) != without_seed(a.cfg))
          continue;
        groups.back().push_back(j);
        used[j] = true;
      }
    }
    return groups;
  }

  // The mean over a seed group of its curves (each smoothed as a lone run's would be), with the
  // min-max band, at every x any of them has (over the curves that have it).
  svg::Series seed_mean(const std::vector<Curve>& curves, bool smooth, const std::string& label,
                        const std::string& color) const {
    std::map<double, std::vector<double>> at;  // x -> the curves' finite values there
    for (const Curve& c : curves) {
      const std::vector<double> y = smooth ? ema(c.y, opt.smoothing, c.updated, c.x) : c.y;
      for (std::size_t k = 0; k < c.x.size() && k < y.size(); ++k)
        if (std::isfinite(c.x[k]) && std::isfinite(y[k])) at[c.x[k]].push_back(y[k]);
    }
    std::vector<double> x, mean, lo, hi;
    for (const auto& [xv, ys] : at) {
      double sum = 0;
      for (double v : ys) sum += v;
      x.push_back(xv);
      mean.push_back(sum / ys.size());
      lo.push_back(*std::min_element(ys.begin(), ys.end()));
      hi.push_back(*std::max_element(ys.begin(), ys.end()));
    }
    svg::Series s = line(label, x, mean, color);
    s.band_lo = std::move(lo);
    s.band_hi = std::move(hi);
    return s;
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
    const auto groups = seed_groups(cr);
    const bool seeded = groups.size() < cr.runs.size();
    std::vector<bool> grouped(cr.runs.size(), false);
    if (seeded) {
      // Several seeds per config: one line per config, the mean over its seeds, with the min-max
      // band; lone runs as usual.
      std::vector<const RunView*> reps;
      for (const auto& g : groups) reps.push_back(cr.runs[g[0]]);
      const std::vector<std::string> labels = chart_labels(reps, cx.keys, "train.seed");
      for (std::size_t gi = 0; gi < groups.size(); ++gi) {
        const auto& g = groups[gi];
        if (g.size() < 2) continue;  // a lone run: drawn below as usual
        for (std::size_t i : g) grouped[i] = true;
        const RunView& v = *cr.runs[g[0]];
        std::vector<Curve> curves, vals;
        for (std::size_t i : g) curves.push_back(cr.curves[i]);
        const bool sm = smoothed(curves[0]);
        smooth = smooth || sm;
        const std::string label = fmt::format("{} ({} seeds)", labels[gi], g.size());
        f.chart.series.push_back(seed_mean(curves, sm, label, v.color));
        f.chart.series.back().dash = v.dash;
        bool all_val = true;
        for (std::size_t i : g) {
          vals.push_back(curve(*cr.runs[i]->run, cx.xkey, metric::val_loss));
          all_val = all_val && any_finite(vals.back().y);
        }
        if (all_val) {
          svg::Series sv = seed_mean(vals, false, label + " (validation)", v.color);
          sv.band_lo.clear();
          sv.band_hi.clear();
          sv.dashed = true;
          sv.in_legend = false;
          f.chart.series.push_back(std::move(sv));
          val = true;
        }
      }
    }
    for (std::size_t i = 0; i < cr.runs.size(); ++i) {
      if (grouped[i]) continue;
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
                       (marked ? "; \u00d7 where a diverged run stopped" : "") +
                       (seeded ? "; several seeds: their mean, band min\u2013max" : "");
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
};

}  // namespace

void loss_figure(const Builder& b) {
  TrainingFigures f{b};
  f.loss();
}

void over_training_figures(const Builder& b) {
  TrainingFigures f{b};
  f.over_training("grad_norm", "Gradient norm over training", metric::grad_norm, "global gradient norm", true, as_number,
                  "Global L2 norm of the gradient before clipping, at each logged step (smoothed like the "
                  "loss).",
                  "no run has metrics with grad_norm", true);
  f.over_training("attn_max_logit", "Max attention logit over training", metric::attn_max_logit,
                  "max attention logit (over layers)", true, finite_max,
                  "Largest pre-softmax attention logit over all layers and heads (max of attn_max_logit) at "
                  "each diagnostics step. Growth without bound is the attention-logit instability that "
                  "QK-Norm and soft-capping address.",
                  "no run has diagnostics (train with --set diag.interval=N)");
  f.over_training("log_z", "Output log Z over training", metric::log_z_mean, "mean log Z", false, as_number,
                  "Mean log-partition function log Z = logsumexp(logits) of the output softmax (log_z_mean). "
                  "z-loss pushes it toward 0; drift signals output-logit growth.",
                  "no run has metrics with log_z_mean");
}

}  // namespace normlab::report::figures_detail
