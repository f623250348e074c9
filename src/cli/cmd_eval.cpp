// `normlab eval`: validation loss, perplexity and bits per byte of a checkpoint.
#include <cmath>

#include <fmt/format.h>

#include "cli/commands.h"
#include "normlab/evaluate.h"

namespace normlab::cli {

void add_eval(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("eval", "Validation loss, perplexity and bits per byte of a checkpoint");
  struct Opts {
    std::string checkpoint, data;
    int batches = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--checkpoint", o->checkpoint, "Run directory, checkpoint folder or model.safetensors")
      ->required();
  cmd->add_option("--data", o->data, "Evaluate on this corpus (text file, folder or token file) "
                                     "instead of the run's validation split");
  cmd->add_option("--batches", o->batches, "Number of evaluation batches (default: train.eval_batches)")
      ->check(integer_option(1));
  cmd->callback([&action, o] {
    action = [o] {
      const EvalResult r = evaluate_checkpoint(o->checkpoint, o->data, o->batches);
      fmt::print("data {}  tokens {}  tokenizer {}\nloss {:.4f}  perplexity {:.3f}  bits/byte {}\n",
                 r.data_name, r.tokens, r.tokenizer, r.loss, r.perplexity,
                 std::isnan(r.bits_per_byte)
                     ? std::string("n/a (the data holds ids outside the run's tokenizer)")
                     : fmt::format("{:.4f} ({:.3f} bytes/token)", r.bits_per_byte,
                                   r.bytes_per_token));
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
