// The HTML report of `normlab report`: one self-contained page (inline SVG, inline CSS, a few lines
// of inline script, no URL anywhere) plus each figure as a standalone SVG file next to it.
//
// Figures, each left out (and listed as not shown, with the reason) when no input has its data:
//   loss            training loss (EMA-smoothed solid over the raw curve drawn faint) and validation
//                   loss (dashed) of every run over training; a diverged run's stop step marked
//                   with its reason as the tooltip
//   lr_sensitivity  final validation loss vs learning rate per sweep variant, sensitivity in the
//                   legend, diverged runs marked; also derived from lone runs that differ in optim.lr
//   scaling_sensitivity, scaling_best_lr   learning-rate sensitivity and the best learning rate of
//                   each sweep variant against its non-embedding parameter count, one line per
//                   variant over sweeps of different model sizes (Wortsman et al. 2023, figure 1)
//   attn_logit_vs_lr  each sweep run's last max attention logit against its learning rate
//   grad_norm_layers_{gradflow,runs}   gradient norm by layer (gradflow study; last diagnostics
//                   record of each run)
//   resid_rms_{gradflow,runs}          residual-stream RMS by depth
//   grad_norm       global gradient norm over training (smoothed like the loss)
//   attn_max_logit  largest attention logit over layers, over training
//   log_z           mean log-partition log Z of the output softmax, over training
//   confirm_RUN_KIND  a run's `doctor --confirm` (RUN/confirm/confirmation.json): the deciding
//                   statistic of the control and each treatment over the replay window, mean over
//                   the seeds with a min-max band, and the verdict table
// and a table of the runs (the step each reached, train loss, final val loss) and their configs
// (columns that differ between runs highlighted; the full config of each run in a collapsible
// block). Series are labelled by what differs among the runs of that chart ("post, lr 3e-3"),
// falling back to the run's name; colors are the Okabe-Ito palette, then dash patterns.
#pragma once
#include <string>
#include <vector>

#include "report/inputs.h"
#include "report/svg.h"

namespace normlab::report {

struct Figure {
  std::string name;     // file name without .svg
  std::string caption;  // one or two sentences under the chart (plain text)
  svg::LineChart chart;
  std::string table_html;  // an optional table under the chart (already HTML)
};

struct ReportOptions {
  // EMA weight of the smoothed training curves (loss, gradient norm) over the logged points: the
  // raw curve is drawn faint under the smoothed one. 0 draws the raw curves only.
  double smoothing = 0.9;
};

struct Report {
  std::string title;
  std::vector<Figure> figures;
  std::vector<std::string> not_shown;  // "Figure title: why", one per figure left out
  std::string html;                    // the page; figures linked from `figures_link`/NAME.svg
};

// Builds every figure and the page. `figures_link` is the folder of the standalone SVG files as
// the page refers to it (relative to the page).
Report build_report(const ReportInputs& in, const std::string& title, const std::string& figures_link,
                    const ReportOptions& opt = {});

// `out_html` without its extension plus "_figures": report.html -> report_figures.
std::string figures_dir_for(const std::string& out_html);

// Writes the page to `out_html` and each figure to figures_dir_for(out_html)/NAME.svg (creating
// the folders). Throws Error when a file cannot be written. Returns the paths written.
std::vector<std::string> write_report(const Report& report, const std::string& out_html);

}  // namespace normlab::report
