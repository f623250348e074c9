// `normlab generate`: sample text from a checkpoint with the KV cache, streamed to stdout.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "model/generate.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "train/checkpoint.h"

namespace normlab::cli {

void add_generate(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a checkpoint (KV-cached, streamed)");
  struct Opts {
    std::string checkpoint, prompt;
    std::vector<int> prompt_ids;
    SamplingOptions s;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--checkpoint", o->checkpoint, "Run directory, checkpoint folder or model.safetensors")
      ->required();
  auto* text = cmd->add_option("--prompt", o->prompt, "Text to continue (byte-level models)");
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids,
                              "Token ids to continue, comma-separated (any vocabulary); prints ids")
                  ->delimiter(',');
  text->excludes(ids);
  ids->excludes(text);
  cmd->add_option("--max-new-tokens", o->s.max_new_tokens, "Tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", o->s.temperature, "Softmax temperature (0 = greedy)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o->s.top_k, "Keep the k most likely tokens (0 = all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->s.top_p, "Keep the smallest set with probability >= p (1 = all)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", o->s.seed, "Sampling seed");
  cmd->callback([&action, o] {
    action = [o] {
      const std::string dir = resolve_checkpoint(o->checkpoint);
      const Config cfg = checkpoint_config(dir);
      Transformer<float> model(cfg.model, 1, cfg.model.seq_len);
      load_checkpoint(dir, model, nullptr, nullptr);
      if (!o->prompt_ids.empty()) {
        for (int id : o->prompt_ids) fmt::print("{} ", id);
        generate(model, o->prompt_ids, o->s, [&](int t) {
          fmt::print("{} ", t);
          std::fflush(stdout);
        });
        std::fputc('\n', stdout);
        return kExitOk;
      }
      if (o->prompt.empty()) throw InputError("generate needs --prompt TEXT or --prompt-ids IDS");
      ByteTokenizer tok;
      if (cfg.model.vocab_size != tok.vocab_size())
        throw InputError(fmt::format(
            "this model has a vocabulary of {} tokens, not normlab's byte-level 256: give the "
            "prompt as token ids with --prompt-ids", cfg.model.vocab_size));
      const std::vector<int> prompt = tok.encode(o->prompt);
      std::fputs(o->prompt.c_str(), stdout);
      generate(model, prompt, o->s, [&](int t) {
        const std::string s = tok.decode(std::span<const int>(&t, 1));
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      });
      std::fputc('\n', stdout);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
