// The block plan: where normalization sits relative to the residual add, as data.
//
// Every sublayer (attention or MLP) with branch F updates the residual stream x by one routine,
//   u = norm_in ? N_in(x) : x;  f = F(u);  g = norm_out ? N_out(f) : f;
//   s = alpha * x + a (.) g;    x' = norm_after_add ? N_post(s) : s
// where a is the branch scale (1 when branch_scale is none; a learnable scalar or a (d_model)
// vector multiplying g elementwise: model.residual_scale, ops/residual_scale.h), or, with
// branch_scale = lerp (nGPT), s = x + a (.) (g - x) with a per-channel a (ops/ngpt.h)
// which the model runs forward and replays backward. A placement is nothing but the choice of these
// fields per sublayer; adding a placement means adding a case to build_plan(), nothing else.
#pragma once
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab {

// The learnable scale on the branch output: none (a = 1), one scalar, or one value per channel;
// lerp: one value per channel interpolating from x to g, s = x + a (.) (g - x) (nGPT's eigen
// learning rates alpha_A, alpha_M, eqs. 10-11; alpha is 1 there).
enum class BranchScale { none, scalar, channel, lerp };

// A learned scale stored as nGPT stores its scales (Loshchilov et al. 2024, sec. 2.5): the
// parameter starts at `scale` and is used as mult() * stored, so that its effective value starts
// at `init` while the optimizer moves it at the rate `scale` sets.
struct StoredScale {
  double init = 1.0, scale = 1.0;
  double mult() const { return init / scale; }
};

struct SublayerPlan {
  bool norm_in = false;         // normalise the branch input
  bool norm_out = false;        // normalise the branch output before the add
  double alpha = 1.0;           // residual scale (DeepNorm)
  bool norm_after_add = false;  // normalise the sum (post-norm): the norm sits ON the residual path
  BranchScale branch_scale = BranchScale::none;  // a in s = alpha x + a (.) g
  double branch_scale_init = 0.0;                // a's initial stored value (every element)
  double branch_scale_mult = 1.0;                // a = mult * stored (StoredScale::mult)
};

struct BlockPlan {
  SublayerPlan attn, mlp;
};

// What happens to queries and keys between the projection and the attention, in order: the
// QK-norm (model.qk_norm, or nGPT's per-head unit-sphere projection), RoPE, and nGPT's s_qk.
enum class QkStage { norm, rope, scale };

// nGPT's scaling factors (sec. 2.5 and eqs. 14-20): s_qk on the unit-norm queries and keys (one
// per query channel, shared by q and k), s_u and s_v on the SwiGLU's up and gate halves (v also
// by sqrt(d_model)), s_z on the logits (one per token). on = false: none of them exists.
struct NgptScales {
  bool on = false;
  StoredScale s_qk, s_u, s_v, s_z;
  double v_gain = 1.0;  // the extra factor on v: sqrt(d_model)
};

struct ModelPlan {
  std::vector<BlockPlan> blocks;
  bool final_norm = false;  // needed iff the last sublayer leaves the residual stream unnormalised
  // The kind of the residual and final norm sites: model.norm, or l2 under nGPT.
  NormKind norm_kind = NormKind::layernorm;
  // The query/key path: its stages, and the QK-norm's kind and scope when it has a norm stage.
  std::vector<QkStage> qk_stages;
  NormKind qk_norm_kind = NormKind::rmsnorm;
  bool qk_per_head = true;
  NgptScales ngpt;
  // DeepNorm's initialisation scale for value/output/MLP weights; 0 when not used.
  double deepnorm_beta = 0.0;
  // The attention-score scale and the readout's multiplier on the logits (model/mup.h:
  // 1/sqrt(D) or model.attn_scale, and 1, under the standard parametrization).
  double attn_scale = 0.0;
  double readout_mult = 1.0;
};

ModelPlan build_plan(const ModelConfig& m);

// Human-readable description, e.g. "x = x + N_out(F(N_in(x)))", for `normlab info` and docs.
std::string describe(const SublayerPlan& p);
// The same for the whole model where it says more than its sublayers (nGPT's scales and its
// unit-norm weights); empty otherwise.
std::string describe_model(const ModelPlan& p);

}  // namespace normlab
