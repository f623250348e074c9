// Evaluation of a checkpoint: validation cross-entropy, perplexity and bits per byte.
#pragma once
#include <string>

namespace normlab {

struct EvalResult {
  double loss = 0;            // mean cross-entropy per token (nats)
  double perplexity = 0;      // exp(loss)
  // Total nats / total UTF-8 bytes of the target tokens' text / ln 2 = loss / ln 2 /
  // bytes_per_token, so that byte-level and subword runs compare on one scale. NaN when the data
  // holds ids the run's tokenizer does not know (a token file made with another tokenizer).
  double bits_per_byte = 0;
  double bytes_per_token = 1;  // of the evaluated targets (Tokenizer::token_byte_lengths)
  long tokens = 0;
  std::string tokenizer;       // Tokenizer::describe() of the run's tokenizer
  std::string data_name;
};

// data_path empty: the validation split of the corpus the checkpoint was trained on; otherwise
// the whole of that corpus (text file, folder or token file). batches <= 0: train.eval_batches.
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               int batches);

}  // namespace normlab
