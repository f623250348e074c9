// normlab_bench decode: batch-1 greedy decoding with the KV cache (Transformer::make_cache /
// forward_cached, as `normlab generate` does): one forward over a random prompt of --prompt tokens
// (prefill), then --tokens single-token forwards, each feeding back the argmax of the previous
// logits, so that the cache ends up holding prompt + tokens positions (<= seq_len). Prefill and
// decode tokens/s are medians over --reps repetitions (after one untimed), each with a fresh
// cache; the KV-cache bytes are those of the cache's k and v vectors
// (n_layer * seq_len * kv_width * 2 * sizeof(float)).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "bench_internal.h"
#include "model/transformer.h"
#include "tensor/rng.h"
#include "tensor/threading.h"

namespace normlab::bench {

json run_decode(const BenchConfig& bc, int prompt_len, int tokens, int threads, int reps) {
  const ModelConfig& mc = bc.model;
  if (prompt_len < 1 || tokens < 1 || prompt_len + tokens > mc.seq_len)
    throw std::runtime_error(fmt::format("--prompt {} + --tokens {} must fit seq_len = {}",
                                         prompt_len, tokens, mc.seq_len));
  if (reps < 1) throw std::runtime_error("--reps must be at least 1");
  const double rss0 = rss_mb();
  const int nthreads = set_thread_count(threads);
  Transformer<float> model(mc, 1, mc.seq_len);
  model.init_params(1234);
  Rng rng(7);
  std::vector<int> prompt(prompt_len);
  for (int& t : prompt) t = static_cast<int>(rng.below(mc.vocab_size));
  const int V = mc.vocab_size;
  std::vector<float> logits(V);
  auto argmax = [&] {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  std::vector<double> pre_ms, dec_ms;
  std::vector<int> first_tokens;
  long kv_bytes = 0;
  int kv_len = 0;
  for (int r = 0; r < 1 + reps; ++r) {  // the first repetition is not timed
    auto cache = model.make_cache();
    std::vector<int> toks;
    const auto t0 = Clock::now();
    model.forward_cached(prompt.data(), prompt_len, cache, logits.data());
    int tok = argmax();
    const auto t1 = Clock::now();
    toks.push_back(tok);
    for (int i = 0; i < tokens; ++i) {
      model.forward_cached(&tok, 1, cache, logits.data());
      tok = argmax();
      toks.push_back(tok);
    }
    const auto t2 = Clock::now();
    if (r == 0)
      first_tokens = toks;
    else if (toks != first_tokens)
      throw std::runtime_error("greedy decoding differs between repetitions");
    if (r > 0) {
      pre_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      dec_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    kv_bytes = static_cast<long>(cache.k.size() + cache.v.size()) * sizeof(float);
    kv_len = cache.len;
  }
  const double p = median(pre_ms), d = median(dec_ms);
  json j;
  j["impl"] = "normlab";
  j["mode"] = "decode";
  j["config"] = bc.name;
  j["description"] = bc.description;
  j["threads"] = nthreads;
  j["params"] = model.table().total();
  j["prompt"] = prompt_len;
  j["tokens"] = tokens;
  j["reps"] = reps;
  j["prefill_ms"] = pre_ms;
  j["decode_ms"] = dec_ms;
  j["prefill_ms_median"] = p;
  j["decode_ms_median"] = d;
  j["prefill_tokens_per_s"] = prompt_len / (p / 1e3);
  j["decode_tokens_per_s"] = tokens / (d / 1e3);
  // The cache as allocated (every position up to seq_len), and what the formula says it should be.
  j["kv_cache_bytes"] = kv_bytes;
  j["kv_cache_formula_bytes"] =
      static_cast<long>(mc.n_layer) * mc.seq_len * mc.kv_width() * 2 * sizeof(float);
  j["kv_cache_positions"] = kv_len;
  j["kv_width"] = mc.kv_width();
  j["generated_head"] =
      std::vector<int>(first_tokens.begin(), first_tokens.begin() + std::min<long>(8, first_tokens.size()));
  j["peak_rss_mb"] = peak_rss_mb();
  j["baseline_rss_mb"] = rss0;
  return j;
}

}  // namespace normlab::bench
