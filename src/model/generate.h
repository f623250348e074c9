// Sampling from a trained model with the KV cache: temperature, top-k, top-p (nucleus), seeded.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
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
  // Generation ends after this token (it is produced and returned), e.g. the tokenizer's EOS.
  std::optional<int> stop_token;
};

// Draws one token from logits (V). Pure function of logits, options and the RNG state.
int sample_token(const float* logits, int V, const SamplingOptions& o, Rng& rng,
                 std::vector<std::pair<float, int>>& scratch);

// Throws InputError unless the prompt is non-empty, shorter than model.seq_len and every id is in
// the vocabulary. generate() checks this first; a caller that prints the prompt calls it before.
void check_prompt(const ModelConfig& cfg, const std::vector<int>& prompt);

// Feeds the prompt, then samples max_new_tokens (fewer when stop_token comes first), calling on_token for each new token as it
// is produced. Returns the new tokens. Beyond the context, a sliding window: once the sequence
// fills model.seq_len, the next token's logits come from the last seq_len tokens recomputed at
// positions 0 .. seq_len-1 (RoPE and learned positions alike, as the model was trained: a window
// always starts at position 0), which costs a forward pass over seq_len tokens per new token.
// Throws InputError for a prompt check_prompt refuses, before any on_token call.
std::vector<int> generate(Transformer<float>& model, const std::vector<int>& prompt,
                          const SamplingOptions& o, const std::function<void(int)>& on_token);

}  // namespace normlab
