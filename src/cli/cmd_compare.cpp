// `normlab compare`: the README's main job. Trains the same model with post, pre and peri norm
// on the embedded corpus (or the config's data) and prints a comparison table.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/status.h"
#include "cli/summary_header.h"
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
    std::string vary;
    int seeds = 1;
  };
  auto o = std::make_shared<Opts>();
  o->cfg.add_to(cmd);
  cmd->add_option("--out,-o", o->out, "Directory for the runs and summary.{json,md}")->capture_default_str();
  cmd->add_option("--placements", o->placements, "Placements to compare")
      ->delimiter(',')
      ->check(one_of<Placement>());
  cmd->add_option("--vary", o->vary,
                  "Compare over any config key instead of the placements: KEY=v1,v2,... (e.g. "
                  "optim.name=adamw,muon), one run per value in OUT/<KEY without section>-VALUE, "
                  "labelled KEY=VALUE")
      ->excludes("--placements");
  cmd->add_option("--seeds", o->seeds,
                  "Runs per placement: seed k trains with train.seed + k (initialisation and data "
                  "order) in OUT/PLACEMENT_seedK (seed 0: OUT/PLACEMENT); the table gives mean ± std "
                  "(min–max) over them")
      ->check(integer_option(1))
      ->capture_default_str();
  cmd->callback([&action, o] {
    action = [o] {
      const Config cfg = o->cfg.load();
      const std::vector<CompareVariant> ps =
          o->vary.empty() ? placement_variants(parse_enums<Placement>(o->placements))
                          : vary_variants(cfg, o->vary);
      install_stop_signals();
      // Progress per run and for the grid: every run, in the order run_comparison trains them
      // (placements, then seeds), from the step its checkpoint holds.
      const auto checkpoint_step = [](const std::string& dir) -> long {
        if (!std::filesystem::exists(std::filesystem::path(dir) / "checkpoints" / "latest")) return 0;
        return std::stol(std::filesystem::path(latest_checkpoint(dir)).filename().string().substr(5));
      };
      GridProgress progress(stdout, ps.size() * static_cast<std::size_t>(o->seeds));
      std::size_t planned = 0;
      for (const CompareVariant& p : ps)
        for (int k = 0; k < o->seeds; ++k) {
          const std::string dir = compare_run_dir(o->out, p, k);
          progress.plan(planned++, std::filesystem::path(dir).filename().string(),
                        checkpoint_step(dir), cfg.train.steps);
        }
      std::size_t started = 0, current = 0;  // runs begun so far; the one training
      TrainHooks hooks;
      hooks.on_log = [&](const StepRecord& r) { progress.update(current, r); };
      hooks.stop_requested = [] { return stop_signal_received(); };
      const auto rows = run_comparison(cfg, ps, o->out, hooks, o->seeds,
                                       [&](const CompareVariant& p, int seed,
                                           const std::string& dir) {
        if (started > 0) progress.end(current);
        current = started++;
        // A rerun says what it continues: step_NNNNNNNN is the latest checkpoint's step.
        const long at = std::filesystem::exists(std::filesystem::path(dir) / "checkpoints" / "latest")
                            ? std::stol(std::filesystem::path(latest_checkpoint(dir)).filename().string().substr(5))
                            : 0;
        progress.note(fmt::format("== {}{} ({} layers, d_model {}, {} steps, lr {}, warmup {}) -> {}{}",
                   p.label,
                   o->seeds > 1 ? fmt::format(" seed {} ({} of {})", cfg.train.seed + seed, seed + 1,
                                              o->seeds)
                                : std::string(),
                   cfg.model.n_layer, cfg.model.d_model, cfg.train.steps,
                   cfg.optim.lr, cfg.optim.warmup_steps, dir,
                   at >= cfg.train.steps ? std::string(", already finished")
                   : at > 0             ? fmt::format(", resuming at step {}", at)
                                        : std::string()));
      });
      if (started > 0) progress.end(current, rows.empty() || rows.back().status() != "interrupted");
      progress.close();
      // doctor's one-line verdict per run (an interrupted one says so and on how many steps).
      const auto print_verdicts = [&] {
        fmt::print("\ndoctor (normlab doctor {}/{} for the details):\n", o->out,
                   o->vary.empty() ? "PLACEMENT" : "RUN");
        for (const auto& r : rows) {
          std::string v;
          try {
            v = diagnose_run(r.run_dir).verdict();
          } catch (const std::exception& e) {
            v = std::string("not diagnosed: ") + e.what();
          }
          fmt::print("  {}: {}\n", std::filesystem::path(r.run_dir).filename().string(), v);
        }
      };
      if (!rows.empty() && rows.back().status() == "interrupted") {
        fmt::print("\n{}", comparison_table(rows));
        print_verdicts();
        fmt::print("\ncompare incomplete: {} interrupted at step {}; no summary written. Rerun "
                   "the same command to continue.\n",
                   std::filesystem::path(rows.back().run_dir).filename().string(),
                   rows.back().result.steps);
        return kExitInterrupted;
      }
      // How the summary was made: command line, version, date, CPU, config.
      prepend_to_file((std::filesystem::path(o->out) / "summary.md").string(),
                      summary_header("normlab compare", o->cfg, cfg, cfg.train.threads));
      fmt::print("\n{}\nwritten: {}/summary.md, {}/summary.json\n", comparison_table(rows), o->out, o->out);
      print_verdicts();
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
