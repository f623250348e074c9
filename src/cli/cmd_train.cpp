// `normlab train`: train a model from a config, or resume a run.
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/status.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"
#include "normlab/communicator.h"

namespace normlab::cli {

void add_train(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("train", "Train a model (or --resume a run)");
  struct Opts {
    ConfigOptions cfg;
    std::string out, resume;
    bool dump = false;
  };
  auto o = std::make_shared<Opts>();
  o->cfg.add_to(cmd);
  cmd->add_option("--out,-o", o->out, "Run directory: config.toml, metrics.jsonl/.csv, checkpoints/");
  cmd->add_option("--resume", o->resume, "Continue the run in this directory from its latest checkpoint");
  cmd->add_flag("--dump-config", o->dump, "Print the fully resolved config (TOML) and exit");
  cmd->callback([&action, o] {
    action = [o] {
      if (o->dump) {
        std::fputs(dump_config_toml(o->cfg.load()).c_str(), stdout);
        return kExitOk;
      }
      if (o->resume.empty() && o->out.empty())
        throw ConfigError({"train needs --out RUN_DIR (or --resume RUN_DIR)"});
      if (!o->resume.empty() && (!o->cfg.config_path.empty() || !o->cfg.overrides.empty()))
        throw ConfigError({"--resume continues a run with its saved config: drop --config/--set"});
      const bool resume = !o->resume.empty();
      const std::string dir = resume ? o->resume : o->out;
      Communicator& comm = world_communicator();
      const std::string world = comm.describe();  // collective: every rank calls it
      const bool root = comm.is_root();
      Trainer trainer(resume ? Config{} : o->cfg.load(), dir, resume);
      install_stop_signals();
      StatusLine status(stdout);
      if (root && comm.world() > 1) fmt::print("{}\n", world);
      if (root && resume) fmt::print("resuming {} at step {}\n", dir, trainer.step());
      TrainHooks hooks;
      hooks.on_log = [&](const StepRecord& r) { status.update(r); };
      hooks.stop_requested = [] { return stop_signal_received(); };
      const TrainResult res = trainer.run(hooks);
      status.finish();
      if (!root) return res.diverged ? kExitDiverged : res.stop_reason == "interrupted" ? kExitInterrupted : kExitOk;
      if (res.stop_reason == "interrupted") {
        fmt::print(stderr, "normlab: interrupted at step {}; checkpoint written, resume with "
                           "`normlab train --resume {}`\n", res.steps, dir);
        return kExitInterrupted;
      }
      if (res.diverged) {
        fmt::print(stderr, "normlab: {}\n", res.stop_reason);
        return kExitDiverged;
      }
      fmt::print("done: {} steps, train loss (last {} steps) {:.4f}{}, {:.0f} tokens/s (run average), "
                 "{:.1f} s\n", res.steps, res.train_loss_steps, res.train_loss,
                 res.val_loss ? fmt::format(", val loss {:.4f}", *res.val_loss) : std::string(),
                 res.tokens_per_s, res.wall_s);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
