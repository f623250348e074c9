#include "model/summary.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/param_table.h"
#include "model/plan.h"
#include "model/transformer.h"

namespace normlab {

ModelSummary summarize(const ModelConfig& m, int batch_size) {
  ModelSummary s;
  const ModelPlan plan = build_plan(m);
  const ParamLayout layout = build_param_table(m, plan);
  for (const ParamSpec& p : layout.table.specs()) {
    if (!p.trained) continue;  // buffers (σReparam's u, v) are state, not parameters
    s.params += p.numel;
    s.params_by_group[std::string(to_string(p.group))] += p.numel;
    // Matrices that multiply activations: the token embedding only as the tied head (its lookup
    // is no product), the learned positions never.
    if (p.shape.size() == 2 && p.role != ParamRole::pos_emb &&
        (p.role != ParamRole::tok_emb || m.tie_embeddings))
      s.matmul_params += p.numel;
  }
  // Attention: 12 x (keys a query reaches) x Cq per layer: seq_len, or the window when it slides.
  double attn_keys = 0;
  for (int l = 0; l < m.n_layer; ++l)
    attn_keys += m.layer_sliding(l) ? std::min(m.seq_len, m.sliding_window) : m.seq_len;
  s.train_flops_per_token = 6.0 * s.matmul_params + 12.0 * attn_keys * m.q_width();
  s.activation_bytes = Transformer<float>::activation_elements(m, batch_size, m.seq_len) *
                       static_cast<long>(sizeof(float));
  s.param_state_bytes = 4L * s.params * static_cast<long>(sizeof(float));
  for (std::size_t l = 0; l < plan.blocks.size(); ++l)
    s.plan.push_back(fmt::format("block {:>3}: attn  {}   |   mlp  {}", l,
                                 describe(plan.blocks[l].attn), describe(plan.blocks[l].mlp)));
  if (const std::string whole = describe_model(plan); !whole.empty()) s.plan.push_back(whole);
  s.final_norm = plan.final_norm;
  return s;
}

}  // namespace normlab
