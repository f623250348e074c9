// The depth figures of the report: the gradient norm by layer and the residual RMS by depth, from
// the gradflow studies (at initialization) and from each run's last diagnostics record; first, the
// coordinate checks (activation size against width, report/coordcheck_chart.h).
#include <cstddef>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "normlab/metrics.h"
#include "report/coordcheck_chart.h"
#include "report/figures.h"
#include "report/figures_detail.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report::figures_detail {

namespace {

struct DepthFigures : Builder {
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
};

}  // namespace

void depth_figures(const Builder& b) {
  DepthFigures f{b};
  for (const CoordcheckInput& c : b.in.coordchecks) {
    Figure cf;
    cf.name = "coordcheck";
    cf.chart = coordcheck_chart(c.result);
    if (b.in.coordchecks.size() > 1) {
      cf.name += "_" + fs::path(c.dir).filename().string();
      cf.chart.title += " (" + fs::path(c.dir).filename().string() + ")";
    }
    cf.caption = "Root mean square of each activation at the last step of the coordinate check "
                "(coordcheck.json), against d_model; the slope is that of log RMS on log width "
                "(0: flat, 1: proportional to width).";
    cf.table_html = coordcheck_table_html(c.result);
    f.add(std::move(cf), "the coordinate check has no finite value");
  }
  f.by_depth_gradflow("grad_norm_layers_gradflow", "Gradient norm by layer (gradflow study)",
                      &GradflowResult::grad_norm_layer, "layer", "gradient norm",
                      "L2 norm of the loss gradient with respect to each block's parameters, per layer, at "
                      "initialization or after the study's training steps (gradflow.json).");
  f.by_depth_runs("grad_norm_layers_runs", "Gradient norm by layer (runs)", metric::grad_norm_block, "layer",
                  "gradient norm", 1.0,
                  "L2 norm of the gradient of each block's parameters (grad_norm_block) in the last "
                  "diagnostics record of each run.");
  f.by_depth_gradflow("resid_rms_gradflow", "Residual RMS by depth (gradflow study)", &GradflowResult::hidden_rms,
                      "depth (0 = embedding, l = after block l)", "hidden-state RMS",
                      "Root mean square of the hidden state after the embedding and after each block, at "
                      "initialization (gradflow.json).");
  f.by_depth_runs("resid_rms_runs", "Residual RMS by depth (runs)", metric::resid_rms,
                  "depth in blocks (0 = embedding, l - 0.5 = after block l's attention, l = after block l)",
                  "residual RMS", 0.5,
                  "Root mean square of the residual stream at each sublayer boundary (resid_rms) in the last "
                  "diagnostics record of each run.");
}

}  // namespace normlab::report::figures_detail
