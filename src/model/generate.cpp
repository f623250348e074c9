#include "model/generate.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "tensor/rng.h"

namespace normlab {

int sample_token(const float* logits, int V, const SamplingOptions& o, Rng& rng,
                 std::vector<std::pair<float, int>>& c) {
  if (o.temperature <= 0) return static_cast<int>(std::max_element(logits, logits + V) - logits);
  c.resize(V);
  for (int v = 0; v < V; ++v) c[v] = {logits[v] / static_cast<float>(o.temperature), v};
  // Sort by logit, descending; ties by token id for determinism.
  std::sort(c.begin(), c.end(), [](auto a, auto b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  int n = V;
  if (o.top_k > 0) n = std::min(n, o.top_k);
  const float m = c[0].first;
  double z = 0;
  for (int i = 0; i < n; ++i) z += std::exp(static_cast<double>(c[i].first - m));
  if (o.top_p < 1.0) {
    double cum = 0;
    int keep = 0;
    while (keep < n) {
      cum += std::exp(static_cast<double>(c[keep].first - m)) / z;
      ++keep;
      if (cum >= o.top_p) break;
    }
    n = keep;
    z = 0;
    for (int i = 0; i < n; ++i) z += std::exp(static_cast<double>(c[i].first - m));
  }
  double u = rng.uniform() * z;
  for (int i = 0; i < n; ++i) {
    u -= std::exp(static_cast<double>(c[i].first - m));
    if (u <= 0) return c[i].second;
  }
  return c[n - 1].second;
}

void check_prompt(const ModelConfig& cfg, const std::vector<int>& prompt) {
  if (prompt.empty()) throw InputError("the prompt is empty");
  if (static_cast<long>(prompt.size()) >= cfg.seq_len)
    throw InputError(fmt::format("the prompt has {} tokens but the model's context (model.seq_len) "
                                 "is {}: it must be shorter to leave room for new tokens",
                                 prompt.size(), cfg.seq_len));
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= cfg.vocab_size)
      throw InputError(fmt::format("prompt token {} (position {}) is outside the model's "
                                   "vocabulary of {} tokens (ids 0 to {})",
                                   prompt[i], i, cfg.vocab_size, cfg.vocab_size - 1));
}

std::vector<int> generate(Transformer<float>& model, const std::vector<int>& prompt,
                          const SamplingOptions& o, const std::function<void(int)>& on_token) {
  const int ctx = model.config().seq_len, V = model.config().vocab_size;
  check_prompt(model.config(), prompt);
  auto cache = model.make_cache();
  std::vector<float> logits(V);
  std::vector<std::pair<float, int>> scratch;
  Rng rng(o.seed);
  std::vector<int> seq = prompt;  // everything so far: the window is its last ctx tokens
  model.forward_cached(prompt.data(), static_cast<int>(prompt.size()), cache, logits.data());
  std::vector<int> out;
  for (int i = 0; i < o.max_new_tokens; ++i) {
    const int tok = sample_token(logits.data(), V, o, rng, scratch);
    out.push_back(tok);
    seq.push_back(tok);
    if (on_token) on_token(tok);
    if (i + 1 == o.max_new_tokens || (o.stop_token && tok == *o.stop_token)) break;
    if (cache.len < ctx) {
      model.forward_cached(&tok, 1, cache, logits.data());
    } else {  // full: slide the window one token and recompute it from position 0
      cache.len = 0;
      model.forward_cached(seq.data() + seq.size() - ctx, ctx, cache, logits.data());
    }
  }
  return out;
}

}  // namespace normlab
