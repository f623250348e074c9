// Sampling from a trained model with the KV cache: temperature, top-k, top-p (nucleus), seeded.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/transformer.h"
#include "tensor/rng.h"

namespace normlab {

struct SamplingOptions {
  int max_new_tokens = 200;
  double temperature = 1.0;  // 0 = greedy
  int top_k = 0;             // 0 = off
  double top_p = 1.0;        // 1 = off
  std::uint64_t seed = 1;
};

// Draws one token from logits (V). Pure function of logits, options and the RNG state.
int sample_token(const float* logits, int V, const SamplingOptions& o, Rng& rng,
                 std::vector<std::pair<float, int>>& scratch);

// Feeds the prompt, then samples up to max_new_tokens (stopping early only at the context limit),
// calling on_token for each new token as it is produced. Returns the new tokens.
// Throws InputError when the prompt is empty or longer than the context.
std::vector<int> generate(Transformer<float>& model, const std::vector<int>& prompt,
                          const SamplingOptions& o, const std::function<void(int)>& on_token);

}  // namespace normlab
