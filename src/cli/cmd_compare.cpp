// `normlab compare`: the README's main job. Trains the same model with post, pre and peri norm
// on the embedded corpus (or the config's data) and prints a comparison table.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/status.h"
#include "doctor/doctor.h"
#include "lab/compare.h"
#include "normlab/checkpoint.h"
#include "report/report.h"

#include <filesystem>

namespace normlab::cli {

void add_compare(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "compare", "Train one model per norm placement (default post, pre, peri) and compare them");
  struct Opts {
    ConfigOptions cfg;
    std::string out = "runs/compare";
    std::vector<std::string> placements = {"post", "pre", "peri"};
  };
  auto o = std::make_shared<Opts>();
  o->cfg.add_to(cmd);
  cmd->add_option("--out,-o", o->out, "Directory for the runs and summary.{json,md}")->capture_default_str();
  cmd->add_option("--placements", o->placements, "Placements to compare")
      ->delimiter(',')
      ->check(one_of<Placement>());
  cmd->callback([&action, o] {
    action = [o] {
      const Config cfg = o->cfg.load();
      const std::vector<Placement> ps = parse_enums<Placement>(o->placements);
      install_stop_signals();
      StatusLine status(stdout);
      TrainHooks hooks;
      hooks.on_log = [&](const StepRecord& r) { status.update(r); };
      hooks.stop_requested = [] { return stop_signal_received(); };
      const auto rows = run_comparison(cfg, ps, o->out, hooks, [&](Placement p) {
        status.finish();
        const std::string dir = (std::filesystem::path(o->out) / to_string(p)).string();
        // A rerun says what it continues: step_NNNNNNNN is the latest checkpoint's step.
        const long at = std::filesystem::exists(std::filesystem::path(dir) / "checkpoints" / "latest")
                            ? std::stol(std::filesystem::path(latest_checkpoint(dir)).filename().string().substr(5))
                            : 0;
        fmt::print("== {} ({} layers, d_model {}, {} steps, lr {}, warmup {}) -> {}{}\n",
                   to_string(p), cfg.model.n_layer, cfg.model.d_model, cfg.train.steps,
                   cfg.optim.lr, cfg.optim.warmup_steps, dir,
                   at >= cfg.train.steps ? std::string(", already finished")
                   : at > 0             ? fmt::format(", resuming at step {}", at)
                                        : std::string());
        std::fflush(stdout);
      });
      status.finish();
      if (!rows.empty() && rows.back().status() == "interrupted") {
        fmt::print("\n{}\ncompare incomplete: {} interrupted at step {}; no summary written. Rerun "
                   "the same command to continue.\n", comparison_table(rows),
                   to_string(rows.back().placement), rows.back().result.steps);
        return kExitInterrupted;
      }
      fmt::print("\n{}\nwritten: {}/summary.md, {}/summary.json\n", comparison_table(rows), o->out, o->out);
      fmt::print("\ndoctor (normlab doctor {}/PLACEMENT for the details):\n", o->out);
      for (const auto& r : rows) {
        std::string v;
        try {
          v = diagnose_run(r.run_dir).verdict();
        } catch (const std::exception& e) {
          v = std::string("not diagnosed: ") + e.what();
        }
        fmt::print("  {}: {}\n", to_string(r.placement), v);
      }
      // The same figures as `normlab report OUT`: loss curves, gradient norms, residual RMS, ...
      std::vector<std::string> dirs;
      for (const auto& r : rows) dirs.push_back(r.run_dir);
      const std::string html = (std::filesystem::path(o->out) / "report.html").string();
      const std::string link = std::filesystem::path(report::figures_dir_for(html)).filename().string();
      const auto rep = report::build_report(report::load_inputs(dirs), "normlab compare", link);
      report::write_report(rep, html);
      fmt::print("report: {} ({} figures)\n", html, rep.figures.size());
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
