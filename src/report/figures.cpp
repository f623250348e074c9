// The figures of the HTML report: each built from the runs, sweeps and gradflow studies that have
// its data, or listed as not shown with the reason. build_figures hands the inputs to
// the figure families in page order: the loss (figures_training.cpp), the learning-rate figures
// (figures_lr.cpp), the figures by depth (figures_depth.cpp), then the other metrics over training
// (figures_training.cpp again); the curves they draw come from figures_curves.cpp, the lines of
// sweeps from figures_sweeps.cpp.
#include <string>
#include <utility>

#include "report/figures.h"
#include "report/figures_detail.h"
#include "report/svg.h"

namespace normlab::report {

namespace figures_detail {

void Builder::add(Figure f, const std::string& missing_reason) {
  if (svg::drawable_points(f.chart) == 0) {
    not_shown.push_back(f.chart.title + ": " + missing_reason);
    return;
  }
  f.chart.id = "fig-" + f.name;
  figures.push_back(std::move(f));
}

}  // namespace figures_detail

Figures build_figures(const ReportInputs& in, const Context& cx, const ReportOptions& opt) {
  Figures out;
  const figures_detail::Builder b{in, cx, opt, out.figures, out.not_shown};
  figures_detail::loss_figure(b);
  figures_detail::learning_rate_figures(b);
  figures_detail::depth_figures(b);
  figures_detail::over_training_figures(b);
  figures_detail::confirmation_figures(b);
  return out;
}

}  // namespace normlab::report
