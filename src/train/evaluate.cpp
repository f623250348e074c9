#include "normlab/evaluate.h"

#include <cmath>

#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "train/checkpoint.h"
#include "train/step.h"

namespace normlab {

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               int batches) {
  const std::string dir = resolve_checkpoint(checkpoint);
  Config cfg = checkpoint_config(dir);
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  const int n = batches > 0 ? batches : std::max(1, cfg.train.eval_batches);
  DataConfig d = cfg.data;
  if (!data_path.empty()) d.path = data_path;
  const TokenCorpus corpus = TokenCorpus::from_path(d.path);
  if (corpus.vocab_size() > cfg.model.vocab_size)
    throw InputError("the evaluation corpus's vocabulary is larger than the model's");
  const CorpusView view =
      data_path.empty() ? corpus.split(cfg.data.val_fraction, T).validation : corpus.view();
  Transformer<float> model(cfg.model, B, T);
  load_checkpoint(dir, model, nullptr, nullptr);
  EvalBatches ev(view, B, T, n);
  const double loss = mean_loss(model, ev);
  EvalResult r;
  r.loss = loss;
  r.perplexity = std::exp(r.loss);
  r.bits_per_byte = r.loss / std::log(2.0);  // byte-level tokens: one token per byte
  r.tokens = static_cast<long>(ev.num_batches()) * B * T;
  r.data_name = corpus.name();
  return r;
}

}  // namespace normlab
