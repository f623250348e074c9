#include "normlab/evaluate.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <cmath>

#include "model/summary.h"
#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "train/checkpoint.h"
#include "train/run_data.h"
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

double eval_bytes_per_token(ExactEvalBatches ev, const Tokenizer& tok) {
  const std::vector<int> len = tok.token_byte_lengths();
  std::vector<int> idx(static_cast<std::size_t>(ev.max_rows()) * ev.seq_len()), tgt(idx.size());
  double bytes = 0, tokens = 0;
  EvalBlock b;
  ev.reset();
  while (ev.next(b, idx.data(), tgt.data()))
    for (long i = 0; i < static_cast<long>(b.rows) * b.len; ++i) {
      const int t = tgt[i];
      bytes += t >= 0 && t < static_cast<int>(len.size()) ? len[t] : 0;
      tokens += 1;
    }
  return tokens > 0 ? bytes / tokens : 0.0;
}

std::string grouped_count(long n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

long exact_eval_budget_tokens(const Config& cfg) {
  const double forward_flops = summarize(cfg.model, cfg.train.batch_size).train_flops_per_token / 3;
  const long by_flops =
      static_cast<long>(std::floor(kExactEvalFlops / std::max(forward_flops, 1.0)));
  const long sampled = static_cast<long>(std::max(1, cfg.train.eval_batches)) *
                       cfg.train.batch_size * cfg.model.seq_len;
  return std::max(by_flops, sampled);
}

namespace {

std::string percent(long part, long whole) {
  return fmt::format("{:.3g}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

// "4,000 evenly spaced windows, 34,999 distinct tokens (100%), each about 14.6 times"
std::string coverage_text(const EvalCoverage& c, long data_tokens) {
  std::string s = fmt::format("{} evenly spaced window{}, {} distinct tokens ({})",
                              grouped_count(c.windows), c.windows == 1 ? "" : "s",
                              grouped_count(c.distinct), percent(c.distinct, data_tokens));
  if (c.targets > c.distinct)
    s += fmt::format(", each about {:.1f} times (the windows overlap)",
                     static_cast<double>(c.targets) / static_cast<double>(c.distinct));
  return s;
}

std::string describe_sample(const EvalResult& r, EvalMode mode) {
  const std::string what =
      r.validation_split ? std::string("the validation split") : r.data_name;
  if (r.exact)
    return fmt::format("tokens scored {} (every token of {} once: {} tokens, the first only as "
                       "context; {} non-overlapping window{} of up to {}, exact)",
                       grouped_count(r.tokens), what, grouped_count(r.data_tokens),
                       grouped_count(r.windows), r.windows == 1 ? "" : "s", r.seq_len);
  const EvalCoverage c{r.windows, r.tokens, r.distinct_tokens};
  std::string s = fmt::format("tokens {} (sampled: {} batch{} of {} x {} from the {} tokens of {}: "
                              "{})",
                              grouped_count(r.tokens), grouped_count(r.batches),
                              r.batches == 1 ? "" : "es", r.batch_size, r.seq_len,
                              grouped_count(r.data_tokens), what, coverage_text(c, r.data_tokens));
  if (mode == EvalMode::automatic)
    s += fmt::format("; scoring every token would be {} tokens, over this model's budget of {} "
                     "(--exact forces it)",
                     grouped_count(r.data_tokens - 1), grouped_count(r.exact_budget_tokens));
  return s;
}

}  // namespace

std::string describe_validation(const Config& cfg, long val_tokens, int world) {
  if (cfg.train.eval_interval <= 0) return "validation: off (train.eval_interval = 0)";
  const int n = std::max(1, cfg.train.eval_batches);
  const int B = cfg.train.batch_size * world, T = cfg.model.seq_len;
  const EvalCoverage c = eval_coverage(val_tokens, B, T, n);
  return fmt::format("validation: {} of {} tokens (train.eval_batches = {} batch{} of {}{} x {}), "
                     "sampled: {}; every {} steps and at the end; `normlab eval` scores every "
                     "token",
                     grouped_count(c.targets), grouped_count(val_tokens), n, n == 1 ? "" : "es", B,
                     world > 1 ? fmt::format(" ({} ranks x {})", world, cfg.train.batch_size) : "",
                     T, coverage_text(c, val_tokens), cfg.train.eval_interval);
}

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::string& data_path,
                               int batches, EvalMode mode, const EvalProgress& progress) {
  if (batches > 0 && mode == EvalMode::exact)
    throw InputError(fmt::format("exact evaluation scores every token once: it takes no number "
                                 "of batches ({} given)", batches));
  const std::string dir = resolve_checkpoint(checkpoint);
  Config cfg = checkpoint_config(dir);
  const int B = cfg.train.batch_size, T = cfg.model.seq_len;
  const int n = batches > 0 ? batches : std::max(1, cfg.train.eval_batches);
  DataConfig d = cfg.data;
  d.path = run_data_path(cfg.data, run_dir_of(dir), data_path);
  const RunTokenizer tok = resolve_tokenizer(cfg, run_dir_of(dir));
  check_vocab(cfg.model, tok);
  // A token file to evaluate on must be of the run's tokenizer (train/run_tokenizer.h).
  if (!data_path.empty()) {
    // --data, as the user gave it: its errors name the option, and their fix is an eval command.
    std::error_code ec;
    if (!std::filesystem::exists(data_path, ec))
      throw InputError(fmt::format("--data {}: no such file or folder (eval --data takes a text "
                                   "file, a folder of text files or a token file)", data_path));
    const std::string run = run_dir_of(dir).empty() ? checkpoint : run_dir_of(dir);
    const std::string tok_name = tok.file.empty() ? std::string("bytes") : tok.file;
    check_token_file_tokenizer(
        d.path, tok, "the run's tokenizer, " + tok_name, "--data " + data_path,
        fmt::format("evaluate on the text it was made from, which eval tokenizes with the run's "
                    "tokenizer: normlab eval --checkpoint {} --data TEXT; or tokenize that text "
                    "for the run first: normlab tokenize --input TEXT --out TEXT.tok --tokenizer "
                    "{}, then normlab eval --checkpoint {} --data TEXT.tok",
                    run, tok_name, run, run));
  } else {
    check_token_file_tokenizer(d.path, tok,
                               "the run's tokenizer, " + (tok.file.empty() ? "bytes" : tok.file));
  }
  const TokenCorpus corpus = TokenCorpus::from_path(d.path, *tok.tok);
  if (corpus.vocab_size() > cfg.model.vocab_size)
    throw InputError(fmt::format("the evaluation data {} has a vocabulary of {} tokens, more than "
                                 "the model's {}", corpus.name(), corpus.vocab_size(),
                                 cfg.model.vocab_size));
  const CorpusView view =
      data_path.empty() ? corpus.split(cfg.data.val_fraction, T).validation : corpus.view();
  EvalResult r;
  r.data_tokens = view.size();
  r.exact_budget_tokens = exact_eval_budget_tokens(cfg);
  r.validation_split = data_path.empty();
  r.batch_size = B;
  r.seq_len = T;
  if (batches > 0) mode = EvalMode::sampled;
  r.exact = mode == EvalMode::exact ||
            (mode == EvalMode::automatic && view.size() - 1 <= r.exact_budget_tokens);
  Transformer<float> model(cfg.model, B, T);
  load_checkpoint(dir, model, nullptr, nullptr);
  if (r.exact) {
    ExactEvalBatches ev(view, B, T);
    r.loss = mean_loss(model, ev, progress);
    r.bytes_per_token = eval_bytes_per_token(ev, *tok.tok);
    r.tokens = r.distinct_tokens = ev.num_targets();
    r.windows = ev.num_windows();
  } else {
    EvalBatches ev(view, B, T, n);
    r.loss = mean_loss(model, ev, nullptr, progress);
    r.bytes_per_token = eval_bytes_per_token(ev, *tok.tok);
    const EvalCoverage c = eval_coverage(view.size(), B, T, n);
    r.tokens = c.targets;
    r.distinct_tokens = c.distinct;
    r.windows = c.windows;
    r.batches = n;
  }
  r.perplexity = std::exp(r.loss);
  // Total nats over total bytes of text, in bits.
  r.bits_per_byte = corpus.vocab_size() > tok.tok->vocab_size()
                        ? std::nan("")
                        : r.loss / std::log(2.0) / r.bytes_per_token;
  r.tokenizer = tok.tok->describe();
  r.data_name = corpus.name();
  r.sample = describe_sample(r, mode);
  return r;
}

}  // namespace normlab
