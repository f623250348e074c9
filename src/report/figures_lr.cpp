// The learning-rate figures of the report: the final loss of each run against its learning rate
// (one line per sweep variant, or lone runs that differ in optim.lr), the learning-rate sensitivity
// and the best learning rate against the non-embedding parameter count over sweeps of different
// model sizes, and the max attention logit at the end of each sweep run against its learning rate.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "normlab/metrics.h"
#include "report/figures.h"
#include "report/figures_detail.h"

using nlohmann::json;

namespace normlab::report::figures_detail {

namespace {

struct LrFigures : Builder {
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
        if (!g.band.empty()) {
          const auto b = g.band.find(lr);
          s.band_lo.push_back(b == g.band.end() ? kNaN : b->second.first);
          s.band_hi.push_back(b == g.band.end() ? kNaN : b->second.second);
        }
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
    const bool banded = std::any_of(groups.begin(), groups.end(), [](const LrGroup& g) { return !g.band.empty(); });
    if (banded) f.chart.subtitle += "; line: mean over seeds, band: min\u2013max";
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
      // fmt and append rather than `"_" + std::to_string(...)`: GCC 12 at -O3 reports a false
      // -Wstringop-overflow in operator+(const char*, string&&) once this function is inlined.
      const std::string suffix = in.sweeps.size() > 1 ? fmt::format("_{}", si + 1) : "";
      std::string title = "Final validation loss vs learning rate";
      if (in.sweeps.size() > 1) title.append(" \u2014 ").append(sw.name);
      lr_figure("lr_sensitivity" + suffix, title, sweep_lr_groups(sw), sw.name + "/sweep.json");
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
};

}  // namespace

void learning_rate_figures(const Builder& b) {
  LrFigures f{b};
  f.lr_sensitivity();
  f.scaling();
  f.attn_logit_vs_lr();
}

}  // namespace normlab::report::figures_detail
