// Evaluation of a checkpoint: validation cross-entropy, perplexity and bits per byte, and a line
// that says what was measured. Two modes (docs/metrics.md, "Evaluation"):
//   exact:   every token of the data scored once, in non-overlapping windows of model.seq_len
//            (ExactEvalBatches in normlab/data.h: the context rule, the short last window);
//   sampled: n batches of train.batch_size evenly spaced windows of model.seq_len (EvalBatches),
//            the windows training's validation uses; they overlap when the data is short.
// `automatic` is exact when it fits the budget below, sampled otherwise.
#pragma once
#include <functional>
#include <string>

#include "normlab/config.h"

namespace normlab {

enum class EvalMode { automatic, exact, sampled };

// The budget of an automatic evaluation: exact when scoring every target costs at most
// kExactEvalFlops forward FLOPs (about one minute at a conservative 20 GFLOP/s on a CPU), or no
// more than the sampled evaluation of train.eval_batches would.
inline constexpr double kExactEvalFlops = 1.2e12;

// The most targets an automatic evaluation scores exactly with this config:
// max(floor(kExactEvalFlops / forward FLOPs per token), train.eval_batches * batch_size * seq_len),
// forward FLOPs per token = a third of ModelSummary::train_flops_per_token.
long exact_eval_budget_tokens(const Config& cfg);

struct EvalResult {
  double loss = 0;            // mean cross-entropy per scored token (nats)
  double perplexity = 0;      // exp(loss)
  // Total nats / total UTF-8 bytes of the target tokens' text / ln 2 = loss / ln 2 /
  // bytes_per_token, so that byte-level and subword runs compare on one scale. NaN when the data
  // holds ids the run's tokenizer does not know (a token file made with another tokenizer).
  double bits_per_byte = 0;
  double bytes_per_token = 1;  // of the evaluated targets (Tokenizer::token_byte_lengths)
  // Targets scored: exact, data_tokens - 1 (each once); sampled, windows * seq_len (a token once
  // per window that holds it).
  long tokens = 0;
  bool exact = false;
  long data_tokens = 0;      // tokens of the evaluated data (the validation split, or --data)
  long distinct_tokens = 0;  // distinct tokens among the targets (exact: = tokens)
  long windows = 0;          // windows scored (exact: ceil(tokens / seq_len))
  int batches = 0;           // sampled: batches of batch_size windows; exact: 0
  int batch_size = 0, seq_len = 0;
  long exact_budget_tokens = 0;  // exact_eval_budget_tokens() of the checkpoint's config
  bool validation_split = true;  // the checkpoint's validation split, not a --data corpus
  std::string tokenizer;         // Tokenizer::describe() of the run's tokenizer
  std::string data_name;
  // What was measured, in one line, e.g. "tokens scored 199,998 (every token of the validation
  // split once, ...)" or "tokens 512,000 (sampled: ...)"; `normlab eval` and Python print it.
  std::string sample;
};

// data_path empty: the validation split of the corpus the checkpoint was trained on; otherwise
// the whole of that corpus (text file, folder or token file). batches > 0: sampled with that many
// batches (mode must not be exact); otherwise `mode` decides, sampled using train.eval_batches.
// Throws InputError for batches > 0 with EvalMode::exact. `progress`, when given, is called after
// every batch with the targets scored so far and the total (a progress bar's position).
using EvalProgress = std::function<void(long done, long total)>;
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               int batches, EvalMode mode = EvalMode::automatic,
                               const EvalProgress& progress = {});

// The sample size of training's validation, for the `train` banner: "validation: 8,192 of
// 200,000 tokens (train.eval_batches = 8 batches of 8 x 128), sampled: ...", or that it is off.
// val_tokens: the validation split's size; world: data-parallel ranks (the global batch).
std::string describe_validation(const Config& cfg, long val_tokens, int world = 1);

// 1234567 -> "1,234,567".
std::string grouped_count(long n);

}  // namespace normlab
