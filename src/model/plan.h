// The block plan: where normalization sits relative to the residual add, as data.
//
// Every sublayer (attention or MLP) with branch F updates the residual stream x by one routine,
//   u = norm_in ? N_in(x) : x;  f = F(u);  g = norm_out ? N_out(f) : f;
//   s = alpha * x + a (.) g;    x' = norm_after_add ? N_post(s) : s
// where a is the branch scale (1 when branch_scale is none; a learnable scalar or a (d_model)
// vector multiplying g elementwise: model.residual_scale, ops/residual_scale.h)
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
};

ModelPlan build_plan(const ModelConfig& m);

// Human-readable description, e.g. "x = x + N_out(F(N_in(x)))", for `normlab info` and docs.
std::string describe(const SublayerPlan& p);

}  // namespace normlab
