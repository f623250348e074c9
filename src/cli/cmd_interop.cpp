// `normlab import --from hf DIR --out RUN_DIR` and `normlab export --to hf RUN_DIR --out DIR`:
// exact conversion between Hugging Face transformers checkpoints and normlab runs (src/interop/hf.h).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "interop/hf.h"
#include "interop/hf_tokenizer_files.h"
#include "train/run_tokenizer.h"
#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace normlab::cli {

namespace {

void add_import(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "import", "Import a Hugging Face transformers model (config.json + safetensors) as a normlab "
                "run directory whose checkpoint eval, generate and train --resume accept");
  struct Opts {
    std::string from = "hf", dir, out;
    int max_seq_len = 4096;
    ConfigOptions cfg;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--from", o->from, "Source format")
      ->check(CLI::IsMember({"hf"}))
      ->default_val("hf");
  cmd->add_option("DIR", o->dir, "Directory written by save_pretrained (config.json, "
                                 "model.safetensors or model.safetensors.index.json)")
      ->required();
  cmd->add_option("--out,-o", o->out, "Run directory to create (config.toml, checkpoints/)")
      ->required();
  cmd->add_option("--max-seq-len", o->max_seq_len,
                  "Cap on model.seq_len for RoPE models (GPT-2's learned positions fix it to "
                  "n_positions)")
      ->check(integer_option(1));
  o->cfg.add_to(cmd);  // training sections (optim, train, data, diag); the model comes from DIR
  cmd->callback([&action, o] {
    action = [o] {
      Config cfg = o->cfg.load();
      if (!(cfg.model == ModelConfig{}))
        throw ConfigError({"model.* comes from the Hugging Face config.json: drop model keys from "
                           "--config/--set (train, optim, data and diag keys are fine)"});
      HfModel hm = import_hf(o->dir, o->max_seq_len);
      cfg.model = hm.config.model;
      validate(cfg);
      if (fs::exists(fs::path(o->out) / "checkpoints" / "latest"))
        throw InputError(fmt::format(
            "run directory {} already holds a checkpoint; choose another --out", o->out));
      fs::create_directories(o->out);
      Transformer<float> model(cfg.model, 1, 1);
      std::copy(hm.params.begin(), hm.params.end(), model.params().begin());
      const auto opt = make_optimizer<float>(model.table(), cfg.optim, cfg.model);
      TrainingState state;
      // As Trainer seeds a fresh run's batch sampler (src/train/trainer.cpp), so that
      // `train --resume` draws the batches a fresh run would.
      state.sampler_rng = sampler_seed(cfg.train);
      {
        std::ofstream f(fs::path(o->out) / "config.toml");
        f << dump_config_toml(cfg);
        if (!f) throw Error(fmt::format("cannot write {}/config.toml", o->out));
      }
      const std::string ckpt =
          save_checkpoint(o->out, cfg, model, *opt, state, std::max(1, cfg.train.keep_checkpoints));
      const ModelConfig& m = cfg.model;
      fmt::print("imported {} from {}: {} layers, d_model {}, {} heads ({} key/value, size {}), "
                 "d_ff {}, vocab {}, seq_len {}, {} parameters\n",
                 to_string(hm.family), o->dir, m.n_layer, m.d_model, m.n_head, m.kv_heads(),
                 m.head_size(), m.d_ff, m.vocab_size, m.seq_len, model.table().total());
      if (m.sliding_window > 0)
        fmt::print("  sliding window {} on layers \"{}\"\n", m.sliding_window, m.layer_pattern);
      for (const auto& n : hm.notes) fmt::print("  note: {}\n", n);
      const std::vector<std::string> tok_files = import_hf_tokenizer(o->dir, o->out);
      if (tok_files.empty()) {
        fmt::print("  no tokenizer.json or tokenizer.model in {}: the run uses normlab's byte "
                   "tokenizer (set data.tokenizer to use another)\n", o->dir);
      } else {
        const RunTokenizer t = resolve_tokenizer(cfg, o->out);
        fmt::print("  tokenizer: {} ({}), copied with {}\n", t.tok->describe(), tok_files[0],
                   tok_files.size() > 1 ? fmt::format("{}", fmt::join(tok_files.begin() + 1,
                                                                     tok_files.end(), ", "))
                                        : std::string("nothing else"));
        if (t.tok->vocab_size() > m.vocab_size)
          fmt::print("  note: the tokenizer has {} tokens, more than the model's {}: ids from {} "
                     "on are refused when encoding\n", t.tok->vocab_size(), m.vocab_size,
                     m.vocab_size);
      }
      fmt::print("wrote {}/config.toml and checkpoint {}\n", o->out, ckpt);
      return kExitOk;
    };
  });
}

void add_export(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "export", "Export a normlab checkpoint as a Hugging Face transformers model directory "
                "(config.json + model.safetensors) when its options map exactly onto a family");
  struct Opts {
    std::string to = "hf", checkpoint, out;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--to", o->to, "Target format")
      ->check(CLI::IsMember({"hf"}))
      ->default_val("hf");
  cmd->add_option("RUN_DIR", o->checkpoint, "Run directory, checkpoint folder or model.safetensors")
      ->required();
  cmd->add_option("--out,-o", o->out, "Directory to write (loadable with "
                                      "AutoModelForCausalLM.from_pretrained)")
      ->required();
  cmd->callback([&action, o] {
    action = [o] {
      const std::string dir = resolve_checkpoint(o->checkpoint);
      const Config cfg = checkpoint_config(dir);
      // Refuse before loading anything. The config is a valid normlab one: what is refused is
      // the export, so the message says so (exit status 2, one line per option, as for a config).
      try {
        hf_family_for(cfg.model);
      } catch (const ConfigError& e) {
        std::string msg = "normlab: cannot export:";
        if (e.problems.size() == 1) msg += " " + e.problems[0];
        else
          for (const auto& p : e.problems) msg += "\n  " + p;
        std::fprintf(stderr, "%s\n", msg.c_str());
        return kExitUsage;
      }
      Transformer<float> model(cfg.model, 1, 1);
      load_checkpoint(dir, model, nullptr, nullptr);
      const HfFamily f = export_hf(cfg.model, model.table(), model.params().data(), o->out);
      const std::string run = run_dir_of(dir);
      const std::vector<std::string> tok_files = export_hf_tokenizer(
          resolve_tokenizer(cfg, run).file, run, cfg.model.seq_len, o->out);
      fmt::print("exported {} as {} to {}{}\n", dir, to_string(f), o->out,
                 tok_files.empty()
                     ? std::string(" (byte tokenizer: no tokenizer files; prompt it with ids)")
                     : fmt::format(" with {}", fmt::join(tok_files, ", ")));
      return kExitOk;
    };
  });
}

}  // namespace

void add_interop(CLI::App& app, Action& action) {
  add_import(app, action);
  add_export(app, action);
}

}  // namespace normlab::cli
