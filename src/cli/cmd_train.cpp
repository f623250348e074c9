// `normlab train`: train a model from a config, or resume a run.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/checkpoint_hint.h"
#include "cli/commands.h"
#include "cli/status.h"
#include "normlab/checkpoint.h"
#include "normlab/communicator.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/evaluate.h"
#include "normlab/trainer.h"
#include "tensor/gemm_bf16.h"
#include "tensor/threading.h"
#include "model/mup.h"
#include "model/param_table.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/config_warnings.h"
#include "train/divergence.h"

namespace normlab::cli {

namespace {

// 1234567 -> "1,234,567".
std::string grouped(long n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

// Settings that are valid but probably not what the user meant: warnings, not errors (the list
// is the library's, which the Python package raises as NormlabWarning).
void warn_about(const Config& c) {
  for (const auto& w : config_warnings(c)) fmt::print(stderr, "normlab: warning: {}\n", w);
}

// The config of `train --init-from SOURCE`: SOURCE's model section changed by --set model.*, the
// other sections from --config and --set, train.init_from = SOURCE.
Config init_from_config(const ConfigOptions& o, const std::string& source) {
  const Config src = checkpoint_config(resolve_checkpoint(source));
  std::vector<std::string> model_sets, other_sets;
  for (const auto& s : o.overrides) (s.rfind("model.", 0) == 0 ? model_sets : other_sets).push_back(s);
  other_sets.push_back("train.init_from=" + source);
  Config cfg = load_config(o.config_path, other_sets);
  if (!(cfg.model == ModelConfig{}))
    throw ConfigError({fmt::format(
        "--init-from {} takes the model from there: drop the model section of {} and change "
        "model options with --set model.KEY=VALUE (or give train.init_from in a config file "
        "that defines the whole model)", source, o.config_path)});
  cfg.model = src.model;
  return parse_config(dump_config_toml(cfg), fmt::format("the model of {}", source), model_sets);
}

// What `train` says when its run diverged: the step, whether it was stopped early, the rule's
// reason, and where to look next.
std::string diverged_line(const TrainResult& res, long steps, const std::string& dir) {
  const std::string why = divergence_reason(res.stop_reason);
  const long at = res.stop_step > 0 ? res.stop_step : res.steps;
  return fmt::format("normlab: diverged at step {} of {}{}: {}\n`normlab doctor {}` says what to "
                     "change",
                     at, steps, at < steps ? " (stopped early)" : "", why, dir);
}

// The config of `train --resume`, resume_config(); a refused change of the model (--set
// model.qk_norm=rmsnorm) gets the way to make it: a new run from the trained weights.
Config resume_config_or_retrofit(const ResumePoint& from, const ConfigOptions& o,
                                 const std::string& source) {
  try {
    return resume_config(from, o.overrides);
  } catch (const ConfigError& e) {
    std::vector<std::string> refused;  // the --set model.* that resuming refused
    for (const auto& s : o.overrides) {
      const std::string key = s.substr(0, s.find('='));
      if (key.rfind("model.", 0) != 0) continue;
      for (const auto& p : e.problems)
        if (p.find(key + " cannot change on resume") != std::string::npos) {
          refused.push_back(s);
          break;
        }
    }
    if (refused.empty()) throw;
    std::vector<std::string> problems = e.problems;
    problems.push_back(fmt::format(
        "to retrofit {} onto the trained weights, start a new run with --init-from {} --set {} "
        "--out NEW_RUN (matching parameters are copied, new ones initialised, the optimizer "
        "starts afresh)",
        refused.size() == 1 ? "it" : "them", source, fmt::join(refused, " --set ")));
    throw ConfigError(std::move(problems));
  }
}

}  // namespace

void add_train(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("train", "Train a model (or --resume a run)");
  struct Opts {
    ConfigOptions cfg;
    std::string out, resume, init_from, data;
    bool dump = false, rewind = false;
  };
  auto o = std::make_shared<Opts>();
  o->cfg.add_to(cmd);
  cmd->add_option("--out,-o", o->out, "Run directory: config.toml, metrics.jsonl/.csv, checkpoints/");
  cmd->add_option("--resume", o->resume,
                  "Continue the run RUN from its newest intact checkpoint (passing over damaged "
                  "ones, which are moved aside), or from one of its checkpoint folders "
                  "RUN/checkpoints/step_N (an older one needs --rewind). With the run's saved "
                  "config; --set may change the keys listed below");
  cmd->add_option("--data", o->data,
                  "With --resume: the run's training data, when it is no longer where the run "
                  "recorded it (data.path, or data.path_from_run from the run directory)");
  cmd->add_flag("--rewind", o->rewind,
                "With --resume RUN/checkpoints/step_N older than the run's newest checkpoint: "
                "rewind the run to it, deleting the later checkpoints and the metrics records "
                "after step N");
  cmd->add_option("--init-from", o->init_from,
                  "Start a new run from the weights of SOURCE (a run directory, a checkpoint folder "
                  "or an imported model) with a fresh optimizer: its model config, changed by "
                  "--set model.KEY=VALUE (parameters whose name and shape match are copied, new ones "
                  "initialised, dropped ones listed); --config and --set give the optim, train, "
                  "data and diag settings. (train.init_from in a config file keeps that file's "
                  "model section instead.)");
  cmd->add_flag("--dump-config", o->dump,
                "Print the fully resolved config (TOML) and exit (with --resume: the config the "
                "resumed run would use)");
  cmd->footer(fmt::format(
      "Keys --resume RUN --set may change (they change no shapes, model, data or batches; e.g. "
      "extend a finished run with --set train.steps=N):\n  {}\nWith a schedule that depends on "
      "train.steps (cosine, linear), an extended run follows the new schedule from its step on.\n"
      "Divergence (the rule of sweep and compare): {}\nExit status: 0 done, 2 bad command line or "
      "config, 3 unreadable input, 4 other failure, 5 diverged, 130 interrupted (resumable).",
      fmt::join(resumable_keys(), ", "), DivergenceRule::describe()));
  cmd->callback([&action, o] {
    action = [o] {
      const bool resume = !o->resume.empty();
      if (resume && !o->cfg.config_path.empty())
        throw ConfigError({"--resume continues a run with its saved config: drop --config (--set "
                           "may change the keys `normlab train --help` lists)"});
      const std::optional<ResumePoint> from =
          resume ? std::optional(with_checkpoint_hint(
                       "normlab train --resume", o->resume,
                       [&] { return resume_point(o->resume); }))
                 : std::nullopt;
      if (!o->data.empty() && !resume)
        throw ConfigError({"--data goes with --resume RUN (a new run takes --set data.path=PATH)"});
      if (o->rewind && !resume)
        throw ConfigError({"--rewind goes with --resume RUN/checkpoints/step_N"});
      if (resume && !o->init_from.empty())
        throw ConfigError({"--resume continues a run from its own checkpoint: drop --init-from"});
      const Config cfg = resume ? resume_config_or_retrofit(*from, o->cfg, o->resume)
                         : !o->init_from.empty() ? init_from_config(o->cfg, o->init_from)
                                                 : o->cfg.load();
      if (o->dump) {
        std::fputs(dump_config_toml(cfg).c_str(), stdout);
        return kExitOk;
      }
      if (!resume && o->out.empty())
        throw ConfigError({"train needs --out RUN_DIR (or --resume RUN_DIR)"});
      const std::string dir = resume ? from->run_dir : o->out;
      Communicator& comm = world_communicator();
      const std::string world = comm.describe();  // collective: every rank calls it
      const bool root = comm.is_root();
      if (root) warn_about(cfg);
      const bool rewind = resume && !is_latest_checkpoint(dir, from->checkpoint);
      if (root && resume)
        for (const auto& d : from->passed_over)
          fmt::print(stderr,
                     "normlab: checkpoint {} is damaged: {}; resuming from {}, the newest intact "
                     "checkpoint{}\n",
                     d.checkpoint, d.damage, from->checkpoint,
                     std::filesystem::exists(d.checkpoint)
                         ? fmt::format(" (the damaged one is kept as {}.damaged)", d.checkpoint)
                         : "");
      Trainer trainer(cfg, dir, resume,
                      resume ? ResumeOptions{from->checkpoint, cfg, o->rewind, o->data}
                             : ResumeOptions{});
      install_stop_signals(root);
      if (resume && trainer.step() >= cfg.train.steps) {
        if (root)
          fmt::print("{} is already complete at step {} (train.steps = {}). To train it further: "
                     "normlab train --resume {} --set train.steps=N (N > {})\n",
                     dir, trainer.step(), cfg.train.steps, dir, trainer.step());
        return kExitOk;
      }
      if (root) {
        if (comm.world() > 1) fmt::print("{}\n", world);
        const std::string source =
            resume ? fmt::format("{}/config.toml (the run's)", dir)
                   : o->cfg.config_path.empty() ? "built-in default" : o->cfg.config_path;
        const std::string sets =
            o->cfg.overrides.empty() ? ""
            : resume ? fmt::format(" with --set {}", fmt::join(o->cfg.overrides, " "))
                     : fmt::format(" + {} --set", o->cfg.overrides.size());
        // The matmul precision only when it is not the default: "auto" says what it resolved to.
        std::string mm;
        if (cfg.train.matmul_precision != MatmulPrecision::float32) {
          const MatmulPrecision got = trainer.matmul_precision();
          mm = fmt::format(" | matmul {}", to_string(got));
          if (got == MatmulPrecision::bf16)
            mm += fmt::format(" on {}", bf16_kernel_name(bf16_kernel()));
          if (cfg.train.matmul_precision == MatmulPrecision::automatic)
            mm += got == MatmulPrecision::bf16 ? " (auto: the CPU has AVX512-BF16)"
                                               : " (auto: no AVX512-BF16 on this CPU)";
        }
        // Trained parameters (the table's, without buffers such as σReparam's u, v or the
        // arena's alignment padding): what `normlab info` counts.
        long trained = 0;
        const ModelConfig& tm = trainer.config().model;
        const ParamLayout layout = build_param_table(tm, build_plan(tm));
        for (const ParamSpec& p : layout.table.specs())
          if (p.trained) trained += p.numel;
        fmt::print("normlab train: {} parameters | data: {} train + {} validation tokens\n"
                   "run {} | config {}{} | {} thread{}{}{}\n",
                   grouped(trained),
                   grouped(trainer.train_tokens()), grouped(trainer.val_tokens()), dir, source,
                   sets, thread_count(), thread_count() == 1 ? "" : "s",
                   comm.world() > 1 ? fmt::format(" x {} MPI ranks", comm.world()) : "", mm);
        if (const auto& r = trainer.init_report()) {
          const auto names = [](const std::vector<std::string>& v) {
            return v.empty() ? std::string() : fmt::format(": {}", fmt::join(v, ", "));
          };
          fmt::print("initialised from {}: {} parameters copied; {} new (initialised){}; {} "
                     "dropped{}; fresh optimizer state\n",
                     r->source, r->copied.size(), r->initialized.size(), names(r->initialized),
                     r->dropped.size(), names(r->dropped));
        }
        if (resume)
          fmt::print("resuming {} at step {} of {}{}\n", dir, trainer.step(), cfg.train.steps,
                     rewind ? fmt::format(" (rewound to {}: later checkpoints and metrics records "
                                          "removed)", from->checkpoint)
                            : "");
        const ModelPlan plan = build_plan(cfg.model);
        const ParamTable table = build_param_table(cfg.model, plan).table;
        // What the plan does beyond its sublayers (nGPT), with the defaults it implies.
        if (const std::string whole = describe_model(plan); !whole.empty())
          fmt::print("{} | optim.weight_decay {:g}, optim.warmup_steps {}\n", whole,
                     cfg.optim.weight_decay, cfg.optim.warmup_steps);
        const std::string optim = describe_optimizer(table, cfg.optim);
        if (!optim.empty()) fmt::print("{}\n", optim);
        const auto mup = describe_mup(cfg.model, table);
        if (!mup.empty()) fmt::print("{}\n", mup.front());  // the base model; info has the rest
        // The sample training's validation loss is measured on (the banner's last line).
        fmt::print("{}\n",
                   describe_validation(trainer.config(), trainer.val_tokens(), comm.world()));
      }
      StatusLine status(stdout, trainer.step());
      TrainHooks hooks;
      hooks.on_log = [&](const StepRecord& r) { status.update(r); };
      hooks.stop_requested = [] { return stop_signal_received(); };
      // The verdict of sweep and compare (train/divergence.h), early stop included.
      const TrainResult res = trainer.run(with_divergence_rule(hooks, trainer, dir));
      status.finish();
      if (!root) return res.diverged ? kExitDiverged : res.stop_reason == "interrupted" ? kExitInterrupted : kExitOk;
      if (res.stop_reason == "interrupted") {
        fmt::print(stderr, "normlab: interrupted at step {}; checkpoint written, resume with "
                           "`normlab train --resume {}`\n", res.steps, dir);
        return kExitInterrupted;
      }
      if (res.diverged) {
        fmt::print(stderr, "{}\n", diverged_line(res, cfg.train.steps, dir));
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
