#include "model/summary.h"

#include <fmt/format.h>

#include "model/plan.h"
#include "model/transformer.h"

namespace normlab {

ModelSummary summarize(const ModelConfig& m, int batch_size) {
  ModelSummary s;
  const Transformer<float> shape_only(m, batch_size, m.seq_len, /*allocate=*/false);
  for (const ParamSpec& p : shape_only.table().specs()) {
    s.params += p.numel;
    s.params_by_group[std::string(to_string(p.group))] += p.numel;
    if (p.shape.size() == 2 && p.name != "pos_emb.weight" &&
        (p.name != "tok_emb.weight" || m.tie_embeddings))
      s.matmul_params += p.numel;
  }
  s.train_flops_per_token =
      6.0 * s.matmul_params + 12.0 * m.n_layer * static_cast<double>(m.seq_len) * m.d_model;
  s.activation_bytes = shape_only.activation_elements() * static_cast<long>(sizeof(float));
  s.param_state_bytes = 4L * s.params * static_cast<long>(sizeof(float));
  const ModelPlan& plan = shape_only.plan();
  for (std::size_t l = 0; l < plan.blocks.size(); ++l)
    s.plan.push_back(fmt::format("block {:>3}: attn  {}   |   mlp  {}", l,
                                 describe(plan.blocks[l].attn), describe(plan.blocks[l].mlp)));
  s.final_norm = plan.final_norm;
  return s;
}

}  // namespace normlab
