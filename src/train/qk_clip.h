// QK-Clip (Kimi Team 2025, "Kimi K2: Open Agentic Intelligence", sec. 2.1, MuonClip): after an
// optimizer step, every attention head whose largest pre-softmax logit in that step exceeded tau
// has its query and key projections rescaled so that, with the same inputs, it would be tau:
//   gamma_h = tau / S_h  (S_h > tau);  W_q^h *= gamma_h^alpha;  W_k^h *= gamma_h^(1 - alpha)
// S_h is what normlab measures as attn_max_logit (the largest |scale q.k| of head h over the
// step's global batch, before the soft-cap): one statistic for the diagnostics, doctor and the
// clip. Rules this implementation states:
// - Grouped-query attention: a key head shared by query heads G(k) takes the largest S of its
//   query heads, gamma_k = tau / max_{h in G(k)} S_h; each query head its own gamma_h. The worst
//   head of a group lands exactly at tau, the others at or below it.
// - Biases of the rescaled rows (attn_qkv_bias) are rescaled with them: the head's whole query
//   (key) projection scales, so its logits scale by gamma_h^alpha gamma_k^(1 - alpha).
// - With QK-Norm the norm removes any scale of the projection (LayerNorm, RMSNorm) or bounds it
//   (DyT, Derf: gamma phi(alpha x + s) + beta), so the clip rescales the q_norm and k_norm gains
//   instead (and their biases), which scales the norm's output exactly, as the effective gain
//   (norm_gain_offset + w): per head where the gain is per channel of the full width
//   (qk_norm_scope = full); where one gain of head_dim is shared by every head (scope = head), by
//   the smallest gamma of the layer's query heads (keys: of its key heads), which brings the
//   layer's worst head to tau.
#pragma once
#include <span>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"

namespace normlab {

// What the last application did, for metrics.jsonl (qk_clip_heads, qk_clip_max_logit).
struct QkClipEvents {
  int heads_clipped = 0;          // query heads with S_h > tau, all layers
  double max_logit = 0;           // the largest S_h before the clip
  std::vector<int> per_layer;     // (L) query heads clipped in each layer
};

class QkClip {
 public:
  QkClip(const ParamTable& table, const ModelConfig& model, double tau, double alpha);
  // Rescales the parameters in `params` (the table's arena) from the step's (L * H) maxima.
  template <class T>
  void apply(T* params, std::span<const double> max_logit_head);
  const QkClipEvents& events() const { return events_; }

 private:
  struct Layer {
    const ParamSpec* wqkv = nullptr;
    const ParamSpec* bqkv = nullptr;
    const ParamSpec *q_gain = nullptr, *q_bias = nullptr, *k_gain = nullptr, *k_bias = nullptr;
  };
  std::vector<Layer> layers_;
  int H_, Hkv_, D_, Cq_;
  bool qk_norm_, full_scope_;
  double gain_offset_, tau_, alpha_;
  QkClipEvents events_;
  std::vector<double> gq_, gk_;  // (H), (Hkv): this layer's clip factors (sized once)
};

}  // namespace normlab
