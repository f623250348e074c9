// The gradient-flow study (Xiong et al. 2020, "On Layer Normalization in the Transformer
// Architecture", figure 3 and theorem 1): at initialisation, or after k training steps, the
// gradient norm of each layer's weights (per sublayer) and the RMS of the hidden state at each
// depth, averaged over N batches, for any set of placements, depths and initialisations.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"

namespace normlab {

struct GradflowSettings {
  std::vector<Placement> placements;
  std::vector<int> depths;
  std::vector<InitKind> inits;
  int batches = 8;       // averaged over
  int train_steps = 0;   // 0: at initialisation
};

struct GradflowResult {
  Placement placement;
  int n_layer;
  InitKind init;
  std::vector<double> grad_norm_layer;  // per block, all its weights
  std::vector<double> grad_norm_attn, grad_norm_mlp;
  std::vector<double> hidden_rms;       // after the embedding and after each block (L + 1)
  double final_loss = 0;                // mean loss over the measured batches
  std::string label() const;
};

// Runs every (placement, depth, init) combination on `base` (its data, widths, seed, optimiser).
std::vector<GradflowResult> run_gradflow(const Config& base, const GradflowSettings& s,
                                         const std::function<void(const GradflowResult&)>& on_result = {});

nlohmann::json gradflow_json(const Config& base, const GradflowSettings& s,
                             const std::vector<GradflowResult>& results);

// Markdown table: last/first layer gradient-norm ratio and hidden-RMS ratio (after the last block
// over after the first block) per combination.
std::string gradflow_table(const std::vector<GradflowResult>& results);

}  // namespace normlab
