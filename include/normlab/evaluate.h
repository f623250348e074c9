// Evaluation of a checkpoint: validation cross-entropy, perplexity and bits per byte.
#pragma once
#include <string>

namespace normlab {

struct EvalResult {
  double loss = 0;            // mean cross-entropy per token (nats)
  double perplexity = 0;      // exp(loss)
  double bits_per_byte = 0;   // loss / ln 2 * tokens / bytes (= loss / ln 2 for the byte tokenizer)
  long tokens = 0;
  std::string data_name;
};

// data_path empty: the validation split of the corpus the checkpoint was trained on; otherwise
// the whole of that corpus (text file, folder or token file). batches <= 0: train.eval_batches.
EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               int batches);

}  // namespace normlab
