// `normlab generate`: sample text from a checkpoint with the KV cache, streamed to stdout.
#include <cstdio>

#include <fmt/format.h>

#include "cli/checkpoint_hint.h"
#include "cli/commands.h"
#include "model/generate.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "train/checkpoint.h"
#include "train/run_tokenizer.h"

namespace normlab::cli {

void add_generate(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a checkpoint (KV-cached, streamed)");
  cmd->footer("Beyond the model's context (model.seq_len), generation continues with a sliding "
              "window: each further token is predicted from the last seq_len tokens, recomputed at "
              "positions 0 to seq_len-1 (RoPE and learned positions alike). The prompt must be "
              "shorter than seq_len and its ids inside the vocabulary; both are checked before "
              "anything is printed.\n");
  struct Opts {
    std::string checkpoint, prompt;
    std::vector<int> prompt_ids;
    SamplingOptions s;
    bool ignore_eos = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--checkpoint", o->checkpoint, "Run directory, checkpoint folder or model.safetensors")
      ->required();
  auto* text = cmd->add_option("--prompt", o->prompt,
                               "Text to continue, encoded with the run's tokenizer (and its BOS); "
                               "the continuation is decoded and streamed")
                   // `--prompt ""` (an unset shell variable): said at once, not "needs --prompt".
                   ->check(CLI::Validator(
                       [](const std::string& s) -> std::string {
                         return s.empty() ? "the prompt is empty: give the text to continue "
                                            "(or --prompt-ids IDS)"
                                          : "";
                       },
                       ""));
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids,
                              "Token ids to continue, comma-separated (any vocabulary); prints ids")
                  ->delimiter(',')
                  ->check(integer_option(0));
  text->excludes(ids);
  ids->excludes(text);
  cmd->add_option("--max-new-tokens", o->s.max_new_tokens,
                  "Tokens to generate, all of them (past seq_len with a sliding window)")
      ->check(integer_option(0));
  cmd->add_option("--temperature", o->s.temperature, "Softmax temperature (0 = greedy)")
      ->check(number_option(0));
  cmd->add_option("--top-k", o->s.top_k, "Keep the k most likely tokens (0 = all)")
      ->check(integer_option(0));
  cmd->add_option("--top-p", o->s.top_p, "Keep the smallest set with probability >= p (1 = all)")
      ->check(number_option(0, 1));
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Keep generating after the tokenizer's end-of-sequence token (by default --prompt "
                "stops there)");
  cmd->add_option("--seed", o->s.seed, "Sampling seed")
      ->check(integer_option(0, std::numeric_limits<long long>::max()));
  cmd->callback([&action, o] {
    action = [o] {
      const std::string dir = with_checkpoint_hint(
          "normlab generate --checkpoint", o->checkpoint,
          [&] { return resolve_checkpoint(o->checkpoint); });
      const Config cfg = checkpoint_config(dir);
      Transformer<float> model(cfg.model, 1, cfg.model.seq_len);
      load_checkpoint(dir, model, nullptr, nullptr);
      if (!o->prompt_ids.empty()) {
        check_prompt(cfg.model, o->prompt_ids);  // before anything is printed
        for (int id : o->prompt_ids) fmt::print("{} ", id);
        generate(model, o->prompt_ids, o->s, [&](int t) {
          fmt::print("{} ", t);
          std::fflush(stdout);
        });
        std::fputc('\n', stdout);
        return kExitOk;
      }
      if (o->prompt.empty()) throw InputError("generate needs --prompt TEXT or --prompt-ids IDS");
      const RunTokenizer rt = resolve_tokenizer(cfg, run_dir_of(dir));
      const Tokenizer& tok = *rt.tok;
      check_vocab(cfg.model, rt);
      // As transformers' tokenizer(prompt): the post-processor's BOS (Llama, Gemma) is added.
      const std::vector<int> prompt = tok.encode(o->prompt, /*add_special=*/true);
      check_prompt(cfg.model, prompt);  // before anything is printed
      if (!o->ignore_eos) o->s.stop_token = run_special_tokens(rt).eos;
      std::fwrite(o->prompt.data(), 1, o->prompt.size(), stdout);
      // The stream starts with the prompt's ids as context, so that the first new token decodes
      // as it does after them (a SentencePiece word's leading space), then prints whole UTF-8
      // characters only.
      DecodeStream stream(tok, /*skip_special=*/true);
      for (int id : prompt) stream.push(id);
      generate(model, prompt, o->s, [&](int t) {
        // A model vocabulary padded beyond the tokenizer's may produce ids the tokenizer has no
        // token for: they stand for no text (as transformers' decode skips them).
        if (t >= tok.vocab_size()) return;
        const std::string s = stream.push(t);
        std::fwrite(s.data(), 1, s.size(), stdout);
        std::fflush(stdout);
      });
      const std::string rest = stream.finish();
      std::fwrite(rest.data(), 1, rest.size(), stdout);
      std::fputc('\n', stdout);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
