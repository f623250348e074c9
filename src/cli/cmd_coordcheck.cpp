// `normlab coordcheck`: the coordinate check (lab/coordcheck.h) of a config at several widths,
// under the standard parametrization and μP by default: a table, coordcheck.json, coordcheck.md and
// coordcheck.svg; --json prints the JSON instead of the table.
#include <fmt/format.h>

#include "cli/commands.h"
#include "lab/coordcheck.h"
#include "report/coordcheck_chart.h"

namespace normlab::cli {

void add_coordcheck(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "coordcheck", "Coordinate check (Yang et al. 2022): activation size against width over the "
                    "first training steps, standard parametrization against muP");
  struct Opts {
    ConfigOptions cfg;
    std::vector<int> widths = {64, 128, 256, 512};
    std::vector<std::string> parametrizations = {"standard", "mup"};
    int steps = 5, seeds = 3;
    std::string out = "runs/coordcheck";
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  o->cfg.add_to(cmd);
  cmd->add_option("--widths", o->widths, "d_model of each model (d_ff and the attention widths "
                                         "scale with it)")
      ->delimiter(',')->check(integer_option(1))->capture_default_str();
  cmd->add_option("--parametrizations", o->parametrizations, "Parametrizations, each at every width")
      ->delimiter(',')->check(one_of<Parametrization>())->capture_default_str();
  cmd->add_option("--steps", o->steps, "Training steps (activations are measured before each and "
                                       "after the last)")
      ->check(integer_option(1))->capture_default_str();
  cmd->add_option("--seeds", o->seeds, "Initialisations averaged over (the batches are the same)")
      ->check(integer_option(1))->capture_default_str();
  cmd->add_option("--out,-o", o->out, "Output directory (coordcheck.json, .md, .svg)")
      ->capture_default_str();
  cmd->add_flag("--json", o->json, "Print coordcheck.json's contents instead of the table");
  cmd->description(cmd->get_description() + "\n" +
                   "The learning rate is optim.lr from the first step (no warmup). muP's base width "
                   "is model.mup_base_width, or else the first width. `normlab report DIR` shows "
                   "the result beside runs and sweeps.");
  cmd->callback([&action, o] {
    action = [o] {
      const Config base = o->cfg.load();
      CoordcheckSettings s;
      s.widths = o->widths;
      s.parametrizations = parse_enums<Parametrization>(o->parametrizations);
      s.steps = o->steps;
      s.seeds = o->seeds;
      const CoordcheckResult r = run_coordcheck(base, s, [&](const CoordcheckCurve& c) {
        if (o->json) return;
        fmt::print("{:<9} d_model {:>5}: loss {:.4f} -> {:.4f}\n", to_string(c.parametrization),
                   c.width, c.loss.front(), c.loss.back());
        std::fflush(stdout);
      });
      const nlohmann::json j = report::write_coordcheck(o->out, base, r);
      const std::string table = coordcheck_table(r);
      if (o->json) {
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("\nRMS of each activation after {} steps, and the slope of log RMS on log "
                   "width (0: flat; 1: grows as the width):\n\n{}\nverdict:\n", s.steps, table);
        for (const std::string& v : coordcheck_verdicts(r)) fmt::print("  {}\n", v);
        fmt::print("\nwritten: {}/coordcheck.json, coordcheck.md, coordcheck.svg\n", o->out);
      }
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
