// `normlab report`: one self-contained HTML page (inline SVG) of runs, sweeps and gradflow
// studies, plus each figure as a standalone SVG file next to it.
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "normlab/errors.h"
#include "report/inputs.h"
#include "report/report.h"
#include "report/tensorboard.h"

namespace normlab::cli {

void print_tensorboard(const report::TensorboardWritten& w, const std::string& dir) {
  fmt::print("wrote TensorBoard event files of {} run{} to {}/ ({} steps, {} scalars; "
             "tensorboard --logdir {})\n", w.files.size(), w.files.size() == 1 ? "" : "s", dir,
             w.events, w.scalars, dir);
}

void add_report(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "report", "Write an HTML report (loss curves, learning-rate sensitivity, gradient flow, residual and "
                "attention statistics, configs) of run, sweep and gradflow directories");
  struct Opts {
    std::vector<std::string> dirs;
    std::string out = "report.html";
    std::string title = "normlab report";
    double smoothing = report::ReportOptions{}.smoothing;
    std::string tensorboard;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("RUN_DIR", o->dirs,
                  "Run directories (config.toml, metrics.jsonl), sweep directories (sweep.json), gradflow "
                  "directories (gradflow.json), or directories of runs")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out,-o", o->out, "HTML file to write; figures go to <out stem>_figures/NAME.svg")
      ->capture_default_str();
  cmd->add_option("--title", o->title, "Title of the page")->capture_default_str();
  cmd->add_option("--smoothing", o->smoothing,
                  "EMA weight per step of the smoothed loss and gradient-norm curves (raw curves "
                  "drawn faint underneath); 0 = raw curves only")
      ->capture_default_str();
  cmd->add_option("--tensorboard", o->tensorboard,
                  "Also write TensorBoard event files of every run to DIR/<run name>/ (every number "
                  "of metrics.jsonl's step lines as a scalar); the HTML page is then written only "
                  "when --out is given");
  cmd->callback([&action, o, cmd] {
    const bool html = o->tensorboard.empty() || cmd->count("--out") > 0;
    action = [o, html] {
      if (!(o->smoothing >= 0 && o->smoothing < 1))
        throw InputError("--smoothing must be a number from 0 (off) up to but not including 1");
      const report::ReportInputs in = report::load_inputs(o->dirs);
      if (!o->tensorboard.empty()) print_tensorboard(report::write_tensorboard(in, o->tensorboard),
                                                     o->tensorboard);
      if (!html) return kExitOk;
      const std::string link = std::filesystem::path(report::figures_dir_for(o->out)).filename().string();
      const report::Report rep = report::build_report(in, o->title, link, {o->smoothing});
      report::write_report(rep, o->out);
      fmt::print("wrote {} ({} figure{}; SVG files in {}/)\n", o->out, rep.figures.size(),
                 rep.figures.size() == 1 ? "" : "s", report::figures_dir_for(o->out));
      for (const auto& s : rep.not_shown) fmt::print("  not shown: {}\n", s);
      for (const auto& s : in.notes) fmt::print("  note: {}\n", s);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
