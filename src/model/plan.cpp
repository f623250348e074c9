#include "model/plan.h"

#include <cmath>

#include <fmt/format.h>

#include "model/mup.h"
#include "model/norm_ops.h"

namespace normlab {

namespace {

SublayerPlan sublayer_for(Placement p, double alpha) {
  switch (p) {
    case Placement::post: return {false, false, 1.0, true};
    case Placement::pre: return {true, false, 1.0, false};
    case Placement::peri: return {true, true, 1.0, false};
    case Placement::reordered: return {false, true, 1.0, false};
    case Placement::deepnorm: return {false, false, alpha, true};
    case Placement::mix: break;     // resolved per block by build_plan
    case Placement::hybrid: break;  // two different sublayers: hybrid_block
  }
  return {};
}

// HybridNorm (Zhuo et al. 2025; its code's OLMo config: attn_norm false, use_{query,key,value}_norm
// true, ffn_norm true, ffn_residual_after_norm true):
//   y = x + Attn_QKVnorm(x);   z = N(y);   x' = z + FFN(z)
// i.e. an attention sublayer normalised after its add, x' = N_post(x + Attn(x)) with q, k, v
// normalised, and an MLP sublayer without a norm; the last one leaves the stream unnormalised, so
// the model ends with the final norm (as OLMo does). HybridNorm* (first_pre): block 0 is Pre-Norm
// with the QKV norms (the code's special config for block 0: attn_norm true,
// ffn_residual_after_norm false).
BlockPlan hybrid_block(bool first_pre) {
  BlockPlan b;
  b.attn.norm_qkv = true;
  if (first_pre) {
    b.attn.norm_in = true;
    b.mlp.norm_in = true;
  } else {
    b.attn.norm_after_add = true;
  }
  return b;
}

// model.residual_scale on one sublayer.
void apply_residual_scale(SublayerPlan& s, const ModelConfig& m) {
  switch (m.residual_scale) {
    case ResidualScale::none: break;
    case ResidualScale::rezero: s.branch_scale = BranchScale::scalar; break;
    case ResidualScale::skipinit:
      s.branch_scale = BranchScale::scalar;
      s.branch_scale_init = m.skipinit_init;
      break;
    case ResidualScale::layerscale:
      s.branch_scale = BranchScale::channel;
      s.branch_scale_init = m.layerscale_init;
      break;
  }
}

// admin-torch's calculate_init(n, "O(logn)"): omega = sqrt((n + 1) / ln(n + 1) - 1) for n residual
// sublayers.
double admin_logn_omega(int n) {
  return std::sqrt((n + 1.0) / std::log(n + 1.0) - 1.0);
}

}  // namespace

ModelPlan build_plan(const ModelConfig& m) {
  ModelPlan plan;
  const int L = m.n_layer;
  // DeepNet (Wang et al. 2022), decoder-only: alpha = (2L)^(1/4), beta = (8L)^(-1/4).
  const double alpha = m.placement == Placement::deepnorm ? std::pow(2.0 * L, 0.25) : 1.0;
  if (m.placement == Placement::deepnorm) plan.deepnorm_beta = std::pow(8.0 * L, -0.25);
  // Mix-LN (Li et al. 2024): post-norm for the first ceil(mix_ratio * L) blocks, pre-norm after.
  const int n_post = m.placement == Placement::mix ? static_cast<int>(std::ceil(m.mix_ratio * L - 1e-9)) : 0;
  // Admin: every post-norm sublayer scales its shortcut (validation admits post and mix only).
  const bool admin = m.init == InitKind::admin;
  const int n_admin = 2 * (m.placement == Placement::mix ? n_post : L);
  plan.admin_profile = admin && m.admin_omega == AdminOmega::profile;
  for (int l = 0; l < L; ++l) {
    BlockPlan b;
    if (m.placement == Placement::hybrid) {
      b = hybrid_block(m.hybrid_first_pre && l == 0);
    } else {
      Placement p = m.placement;
      if (p == Placement::mix) p = l < n_post ? Placement::post : Placement::pre;
      SublayerPlan s = sublayer_for(p, alpha);
      if (admin && p == Placement::post) {
        s.shortcut_scale = true;
        s.shortcut_init = m.admin_omega == AdminOmega::logn ? admin_logn_omega(n_admin) : 1.0;
      }
      b = {s, s};
    }
    for (SublayerPlan* s : {&b.attn, &b.mlp}) apply_residual_scale(*s, m);
    plan.blocks.push_back(b);
  }
  plan.qk_norm = m.qk_norm != QKNormKind::none || m.placement == Placement::hybrid;
  if (plan.qk_norm)
    plan.qk_kind = m.qk_norm != QKNormKind::none ? qk_norm_kind(m.qk_norm) : m.norm;
  plan.final_norm = L == 0 || !plan.blocks.back().mlp.norm_after_add;
  plan.attn_scale = attention_scale(m);
  plan.readout_mult = readout_multiplier(m);
  return plan;
}

std::string describe(const SublayerPlan& p) {
  // F_qkv: the attention branch with its queries, keys and values normalised (HybridNorm).
  std::string branch = std::string(p.norm_qkv ? "F_qkv" : "F") + (p.norm_in ? "(N_in(x))" : "(x)");
  if (p.norm_out) branch = "N_out(" + branch + ")";
  if (p.branch_scale == BranchScale::scalar) branch = "a * " + branch;
  if (p.branch_scale == BranchScale::channel) branch = "diag(l) " + branch;
  std::string res = p.alpha == 1.0 ? "x" : fmt::format("{:.4g} * x", p.alpha);
  if (p.shortcut_scale) res = "diag(omega) " + res;
  const std::string sum = res + " + " + branch;
  return p.norm_after_add ? "x = N_post(" + sum + ")" : "x = " + sum;
}

}  // namespace normlab
