// What `normlab info` reports about a model: parameter counts per group, training FLOPs per
// token, activation memory per step, and the resolved block plan.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab {

struct ModelSummary {
  long params = 0;                          // distinct trainable parameters (tied head counted once)
  std::map<std::string, long> params_by_group;
  long matmul_params = 0;                   // parameters that take part in matrix products
  // Training FLOPs per token: 6 * matmul_params + 12 * sum over layers of T_l * Cq, T_l = seq_len
  // or the sliding window (forward + backward; attention
  // scores and weighted values counted over the full T x T square, as in PaLM's appendix B).
  double train_flops_per_token = 0;
  long activation_bytes = 0;                // float32 activations + backward scratch, one micro-batch
  long param_state_bytes = 0;               // parameters, gradients and two AdamW moments
  std::vector<std::string> plan;            // one line per block: its two sublayers
  bool final_norm = false;
};

ModelSummary summarize(const ModelConfig& m, int batch_size);

}  // namespace normlab
