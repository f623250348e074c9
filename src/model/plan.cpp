#include "model/plan.h"

#include <cmath>

#include <fmt/format.h>

#include "model/mup.h"

namespace normlab {

namespace {

SublayerPlan sublayer_for(Placement p, double alpha) {
  switch (p) {
    case Placement::post: return {false, false, 1.0, true};
    case Placement::pre: return {true, false, 1.0, false};
    case Placement::peri: return {true, true, 1.0, false};
    case Placement::reordered: return {false, true, 1.0, false};
    case Placement::deepnorm: return {false, false, alpha, true};
    case Placement::mix: break;  // resolved per block by build_plan
  }
  return {};
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
  for (int l = 0; l < L; ++l) {
    Placement p = m.placement;
    if (p == Placement::mix) p = l < n_post ? Placement::post : Placement::pre;
    SublayerPlan s = sublayer_for(p, alpha);
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
    plan.blocks.push_back({s, s});
  }
  plan.final_norm = L == 0 || !plan.blocks.back().mlp.norm_after_add;
  plan.attn_scale = attention_scale(m);
  plan.readout_mult = readout_multiplier(m);
  return plan;
}

std::string describe(const SublayerPlan& p) {
  std::string branch = p.norm_in ? "F(N_in(x))" : "F(x)";
  if (p.norm_out) branch = "N_out(" + branch + ")";
  if (p.branch_scale == BranchScale::scalar) branch = "a * " + branch;
  if (p.branch_scale == BranchScale::channel) branch = "diag(l) " + branch;
  const std::string res = p.alpha == 1.0 ? "x" : fmt::format("{:.4g} * x", p.alpha);
  const std::string sum = res + " + " + branch;
  return p.norm_after_add ? "x = N_post(" + sum + ")" : "x = " + sum;
}

}  // namespace normlab
