// `normlab gradflow`: per-layer gradient norms and hidden-state RMS at initialisation (or after
// k steps) for several placements, depths and initialisations in one call.
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "lab/gradflow.h"

namespace normlab::cli {

void add_gradflow(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "gradflow", "Gradient norm per layer and hidden-state RMS per depth at initialisation "
                  "(Xiong et al. 2020), for several placements, depths and initialisations");
  struct Opts {
    ConfigOptions cfg;
    std::vector<std::string> placements = {"post", "pre", "peri"};
    std::vector<int> depths = {6, 12};
    std::vector<std::string> inits = {"gpt2", "xavier"};
    int batches = 8, steps = 0;
    std::string out = "runs/gradflow";
  };
  auto o = std::make_shared<Opts>();
  o->cfg.add_to(cmd);
  cmd->add_option("--placements", o->placements, "Placements")->delimiter(',')
      ->check(one_of<Placement>())->capture_default_str();
  cmd->add_option("--layers", o->depths, "Depths L")
      ->delimiter(',')
      ->check(integer_option(1))
      ->capture_default_str();
  cmd->add_option("--init", o->inits,
                  "Initialisations: gpt2 = normal(0, model.init_std) with 1/sqrt(2L) residual "
                  "scaling, normal = without it, xavier = Xavier uniform (original Transformer)")
      ->delimiter(',')->check(one_of<InitKind>())->capture_default_str();
  cmd->add_option("--batches", o->batches, "Batches averaged over")
      ->check(integer_option(1))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Train this many steps first (0 = at initialisation)")
      ->check(integer_option(0))->capture_default_str();
  cmd->add_option("--out,-o", o->out, "Output directory (gradflow.json, gradflow.md)")->capture_default_str();
  cmd->description(cmd->get_description() + "\n" +"Width, activation, norm kind, init_std etc. come from the config: e.g. "
                "--set model.d_model=512 --set model.mlp=gelu --set model.init_std=0.02.");
  cmd->callback([&action, o] {
    action = [o] {
      const Config base = o->cfg.load();
      GradflowSettings s;
      s.placements = parse_enums<Placement>(o->placements);
      s.inits = parse_enums<InitKind>(o->inits);
      s.depths = o->depths;
      s.batches = o->batches;
      s.train_steps = o->steps;
      const auto results = run_gradflow(base, s, [](const GradflowResult& r) {
        fmt::print("{:<28} grad last/first {:8.3f}   hidden RMS last/first {:8.3f}\n", r.label(),
                   r.grad_norm_layer.back() / r.grad_norm_layer.front(),
                   r.hidden_rms.back() / r.hidden_rms[1]);
        std::fflush(stdout);
      });
      std::filesystem::create_directories(o->out);
      std::ofstream(std::filesystem::path(o->out) / "gradflow.json") << gradflow_json(base, s, results).dump(1) << '\n';
      const std::string table = gradflow_table(results);
      std::ofstream(std::filesystem::path(o->out) / "gradflow.md") << table;
      fmt::print("\n{}\nwritten: {}/gradflow.json, {}/gradflow.md\n", table, o->out, o->out);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
