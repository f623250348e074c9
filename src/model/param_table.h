// The parameter table of a model as a function of its config and block plan: every parameter
// declared once (name, shape, init rule, group, decay), plus the arena offsets ("slots") the
// Transformer reads its weights from. `normlab info`, Hugging Face interop and the Transformer all
// call build_param_table; none needs a model to know the table.
#pragma once
#include <vector>

#include "model/params.h"
#include "model/plan.h"
#include "normlab/config.h"

namespace normlab {

inline constexpr long kNoSlot = -1;  // an absent parameter

// A norm site: its kind (model/norm_ops.h; fixed here, once) and its parameters: the gain w, the
// bias b, and DyT's / Derf's scalars alpha and shift (kNoSlot where the kind has none).
struct NormSlots {
  NormKind kind = NormKind::layernorm;
  long w = kNoSlot, b = kNoSlot, alpha = kNoSlot, shift = kNoSlot;
  bool on = false;  // the site exists (an l2 site has no parameter at all)
  bool present() const { return on; }
};
struct SublayerSlots {
  NormSlots norm_in, norm_out, norm_post;
  // The branch scale a: `<sublayer>.res_scale` (1) or (d_model); nGPT's `<sublayer>.alpha`
  // (d_model).
  long scale = kNoSlot;
  long omega = kNoSlot;  // `<sublayer>.res_omega`, Admin's shortcut scale (d_model)
};
struct AttnSlots {
  SublayerSlots res;
  long wqkv = kNoSlot, bqkv = kNoSlot, wo = kNoSlot, bo = kNoSlot;
  NormSlots q_norm, k_norm, v_norm;  // v_norm: HybridNorm's (norm_qkv) only
  long wg = kNoSlot;    // `attn.wg.weight` (H or H D, C): model.attn_gate's gate projection W_g
  long s_qk = kNoSlot;  // nGPT: (Cq) on unit-norm queries and keys
};
struct MlpSlots {
  SublayerSlots res;
  long w_in = kNoSlot, b_in = kNoSlot, w_out = kNoSlot, b_out = kNoSlot;
  long s_u = kNoSlot, s_v = kNoSlot;  // nGPT: (F) on the up and gate halves of w_in's output
};
struct BlockSlots {
  AttnSlots attn;
  MlpSlots mlp;
};
// σReparam of one linear weight W (O, I) of the blocks (model.sigma_reparam): its slot, and per
// row block b of it (one block, or q/k/v of wqkv, gate/up of a gated w_in: ParamSpec::row_blocks)
// the learned scalar gamma[b] and the power-iteration vectors, u (O: each block's rows of its own)
// and v (blocks, I), buffers (ParamSpec::trained = false). ops/sigma_reparam.h has the math.
struct SigmaSlots {
  long w = kNoSlot, gamma = kNoSlot, u = kNoSlot, v = kNoSlot;
  int out = 0, in = 0;    // O, I
  std::vector<int> rows;  // rows of each row block, in order (sum = O)
};
struct ModelSlots {
  long tok_emb = kNoSlot, pos_emb = kNoSlot, lm_head = kNoSlot;  // lm_head = tok_emb when tied
  long s_z = kNoSlot;  // nGPT: (V) on the logits
  NormSlots final_norm;
  std::vector<BlockSlots> blocks;  // L
  std::vector<SigmaSlots> sigma;   // the reparametrized weights, in table order
};

struct ParamLayout {
  ParamTable table;
  ModelSlots slots;
};

// Init rules (cfg.init): normal(init_std) or Xavier-uniform for matrices; the residual output
// projections (wo, w_out) scaled by 1/sqrt(2L) (gpt2) or by DeepNorm's beta; with DeepNorm the
// MLP input projection and the value rows of wqkv scaled by beta too; norm gains start so that
// (norm_gain_offset + w) = 1, biases at 0; DyT's and Derf's alpha at the site's model.dyt_alpha_*
// (attention sublayer, MLP sublayer, final, QK), Derf's shift at 0; a residual branch scale
// (model.residual_scale) `blocks.{l}.{attn,mlp}.res_scale`, shape (1) or (d_model), at the plan's
// branch_scale_init, in the norm group (a gain on the branch, like a norm's), not decayed; Admin's
// shortcut scale (model.init = admin) `blocks.{l}.{attn,mlp}.res_omega`, (d_model), at the plan's
// shortcut_init (the profiling pass overwrites it), in the norm group, not decayed; HybridNorm's
// q/k/v norms (`q_norm`, `k_norm`, `v_norm`) of the plan's qk_norm_kind, per head or over the
// full width as model.qk_norm_scope says. nGPT (plan.ngpt.on): `blocks.{l}.{attn,mlp}.alpha`
// (d_model), `blocks.{l}.attn.s_qk` (Cq), `blocks.{l}.mlp.s_u`, `.s_v` (d_ff) and `s_z` (V), each
// at its StoredScale::scale, in the norm group, not decayed; no norm parameter (its sites are
// l2); every matrix and embedding under a UnitNorm constraint along d_model (rows of wqkv, w_in,
// tok_emb, lm_head; columns of wo, w_out). The attention gate's W_g (model.attn_gate) is a
// projection like wqkv (same init, attention group, decayed); the attention components'
// parameters (model/attn_component.h: a learned sink's logits, model.attn_sink, from 0) follow
// it, in the attention group, not decayed. Under model.parametrization =
// mup, apply_mup (model/mup.h) sets the width shapes and rescales the matrix-like weights'
// initialisation (a scalar alpha or shift has no width dimension: fixed, as in the base model).
// With model.sigma_reparam, each block weight `<w>.weight` (wqkv, wo, w_in, w_out) is followed by
// `<w>.sigma_gamma` (row blocks), trained, in the weight's group, not decayed, and the buffers
// `<w>.sigma_u` (O) and `<w>.sigma_v` (row blocks, I); all three start as placeholders that
// Transformer::init_params sets from the drawn W (gamma = sigma(W_0), u and v its singular
// vectors). The embeddings and the LM head are not reparametrized.
ParamLayout build_param_table(const ModelConfig& cfg, const ModelPlan& plan);

}  // namespace normlab
