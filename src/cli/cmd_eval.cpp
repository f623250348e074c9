// `normlab eval`: validation loss, perplexity and bits per byte of a checkpoint, and what was
// measured (every token once, or a sample: normlab/evaluate.h).
#include <cmath>

#include <fmt/format.h>

#include "cli/checkpoint_hint.h"
#include "cli/commands.h"
#include "normlab/evaluate.h"

namespace normlab::cli {

void add_eval(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("eval", "Validation loss, perplexity and bits per byte of a checkpoint");
  struct Opts {
    std::string checkpoint, data;
    int batches = 0;
    bool exact = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--checkpoint", o->checkpoint, "Run directory, checkpoint folder or model.safetensors")
      ->required();
  cmd->add_option("--data", o->data, "Evaluate on this corpus (text file, folder or token file) "
                                     "instead of the run's validation split");
  auto* batches = cmd->add_option("--batches", o->batches,
                                  "Sample: this many batches of train.batch_size evenly spaced "
                                  "windows (default: every token once when the data fits the "
                                  "budget, else train.eval_batches batches)")
                      ->check(integer_option(1));
  cmd->add_flag("--exact", o->exact, "Score every token once, however long it takes (the default "
                                     "when the data fits the budget)")
      ->excludes(batches);
  cmd->footer(fmt::format(
      "Without --batches, eval scores every token of the data once (non-overlapping windows of "
      "model.seq_len) when that costs at most {:.2g} forward FLOPs (about a minute at 20 GFLOP/s) "
      "or no more than the sampled evaluation; otherwise it samples train.eval_batches batches and "
      "says so. See docs/metrics.md, \"Evaluation\".",
      kExactEvalFlops));
  cmd->callback([&action, o] {
    action = [o] {
      const EvalResult r = with_checkpoint_hint("normlab eval --checkpoint", o->checkpoint, [&] {
        return evaluate_checkpoint(o->checkpoint, o->data, o->batches,
                                   o->exact ? EvalMode::exact : EvalMode::automatic);
      });
      fmt::print("data {}  tokenizer {}\n{}\nloss {:.4f}  perplexity {:.3f}  bits/byte {}\n",
                 r.data_name, r.tokenizer, r.sample, r.loss, r.perplexity,
                 std::isnan(r.bits_per_byte)
                     ? std::string("n/a (the data holds ids outside the run's tokenizer)")
                     : fmt::format("{:.4f} ({:.3f} bytes/token)", r.bits_per_byte,
                                   r.bytes_per_token));
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
