#include "normlab/evaluate.h"

#include <cmath>

#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "train/checkpoint.h"
#include "train/run_tokenizer.h"
#include "train/evaluate.h"
#include "train/step.h"

#include <fmt/format.h>

namespace normlab {

double eval_bytes_per_token(EvalBatches ev, const Tokenizer& tok) {
  const std::vector<int> len = tok.token_byte_lengths();
  const std::size_t n = static_cast<std::size_t>(ev.local_batch()) * ev.seq_len();
  std::vector<int> idx(n), tgt(n);
  double bytes = 0, tokens = 0;
  ev.reset();
  while (ev.next(idx.data(), tgt.data()))
    for (int t : tgt) {
      bytes += t >= 0 && t < static_cast<int>(len.size()) ? len[t] : 0;
      tokens += 1;
    }
  return tokens > 0 ? bytes / tokens : 0.0;
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               int batches) {
  const std::string dir = resolve_checkpoint(checkpoint);
  Config cfg = checkpoint_config(dir);
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  const int n = batches > 0 ? batches : std::max(1, cfg.train.eval_batches);
  DataConfig d = cfg.data;
  if (!data_path.empty()) d.path = data_path;
  const RunTokenizer tok = resolve_tokenizer(cfg, run_dir_of(dir));
  check_vocab(cfg.model, tok);
  const TokenCorpus corpus = TokenCorpus::from_path(d.path, *tok.tok);
  if (corpus.vocab_size() > cfg.model.vocab_size)
    throw InputError(fmt::format("the evaluation data {} has a vocabulary of {} tokens, more than "
                                 "the model's {}", corpus.name(), corpus.vocab_size(),
                                 cfg.model.vocab_size));
  const CorpusView view =
      data_path.empty() ? corpus.split(cfg.data.val_fraction, T).validation : corpus.view();
  Transformer<float> model(cfg.model, B, T);
  load_checkpoint(dir, model, nullptr, nullptr);
  EvalBatches ev(view, B, T, n);
  const double loss = mean_loss(model, ev);
  EvalResult r;
  r.loss = loss;
  r.perplexity = std::exp(r.loss);
  // Total nats over total bytes of text, in bits.
  r.bytes_per_token = eval_bytes_per_token(ev, *tok.tok);
  r.bits_per_byte = corpus.vocab_size() > tok.tok->vocab_size()
                        ? std::nan("")
                        : r.loss / std::log(2.0) / r.bytes_per_token;
  r.tokenizer = tok.tok->describe();
  r.tokens = static_cast<long>(ev.num_batches()) * B * T;
  r.data_name = corpus.name();
  return r;
}

}  // namespace normlab
