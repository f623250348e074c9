// The block plan: where normalization sits relative to the residual add, as data.
//
// Every sublayer (attention or MLP) with branch F updates the residual stream x by one routine,
//   u = norm_in ? N_in(x) : x;  f = F(u);  g = norm_out ? N_out(f) : f;
//   s = alpha * w (.) x + a (.) g;    x' = norm_after_add ? N_post(s) : s
// where a is the branch scale (1 when branch_scale is none; a learnable scalar or a (d_model)
// vector multiplying g elementwise: model.residual_scale, ops/residual_scale.h) and w is Admin's
// shortcut scale omega (1 unless shortcut_scale: a learnable (d_model) vector, model.init = admin;
// the same op with x and g exchanged). An attention branch with norm_qkv normalises its queries,
// keys and values after the projection (HybridNorm: q and k at the model's QK-norm stage, v before
// the attention reads it)
// which the model runs forward and replays backward. A placement is nothing but the choice of these
// fields per sublayer; adding a placement means adding a case to build_plan(), nothing else.
#pragma once
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab {

// The learnable scale on the branch output: none (a = 1), one scalar, or one value per channel.
enum class BranchScale { none, scalar, channel };

struct SublayerPlan {
  bool norm_in = false;         // normalise the branch input
  bool norm_out = false;        // normalise the branch output before the add
  double alpha = 1.0;           // residual scale (DeepNorm)
  bool norm_after_add = false;  // normalise the sum (post-norm): the norm sits ON the residual path
  BranchScale branch_scale = BranchScale::none;  // a in s = alpha x + a (.) g
  double branch_scale_init = 0.0;                // a's initial value (every element)
  // Admin: s = w (.) x + g with w the learnable `res_omega` (d_model), starting at shortcut_init
  // (model.admin_omega = logn) or set by the profiling pass at initialisation (= profile).
  bool shortcut_scale = false;
  double shortcut_init = 1.0;
  bool norm_qkv = false;  // attention only: HybridNorm's q, k, v norms (kind ModelPlan::qk_kind)
};

struct BlockPlan {
  SublayerPlan attn, mlp;
};

struct ModelPlan {
  std::vector<BlockPlan> blocks;
  bool final_norm = false;  // needed iff the last sublayer leaves the residual stream unnormalised
  // DeepNorm's initialisation scale for value/output/MLP weights; 0 when not used.
  double deepnorm_beta = 0.0;
  // The attention-score scale and the readout's multiplier on the logits (model/mup.h:
  // 1/sqrt(D) or model.attn_scale, and 1, under the standard parametrization).
  double attn_scale = 0.0;
  double readout_mult = 1.0;
  // Queries and keys are normalised (model.qk_norm, or HybridNorm's norm_qkv), by norms of kind
  // qk_kind: model.qk_norm's when set, else model.norm's (HybridNorm).
  bool qk_norm = false;
  NormKind qk_kind = NormKind::layernorm;
  // Admin's profiling pass sets every res_omega at initialisation (Transformer::admin_profile).
  bool admin_profile = false;
};

ModelPlan build_plan(const ModelConfig& m);

// Human-readable description, e.g. "x = x + N_out(F(N_in(x)))", for `normlab info` and docs.
std::string describe(const SublayerPlan& p);

}  // namespace normlab
