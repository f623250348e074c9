// The parameter table: every parameter of the model declared once (name, shape, initialisation,
// group, weight decay). Arenas for parameters, gradients and optimizer state, checkpoint names,
// per-layer diagnostics and parity tests all iterate this table; nothing keeps a parallel list.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace normlab {

enum class ParamInit { normal, uniform, constant };
// Rows [row0, row0 + rows) of a matrix have their drawn initial values multiplied by `scale`
// (DeepNorm's value rows of the fused wqkv, Wang et al. 2022, "DeepNet", sec. 3.2); rows = 0: none.
struct RowScale {
  long row0 = 0, rows = 0;
  double scale = 1.0;
};
// A constraint the optimizer restores after every step (Optimizer::update, train/optimizer.h):
// none, or every row / every column of a matrix at unit L2 norm (nGPT, Loshchilov et al. 2024,
// sec. 2.6: the vectors along the embedding dimension; rows of (out, C) matrices and embeddings,
// columns of (C, in) ones). The model's initialisation applies it too.
enum class UnitNorm { none, rows, cols };
std::string_view to_string(UnitNorm u);

// Coarse groups for diagnostics (update ratios, grad norms) and optimizer settings.
enum class ParamGroup { embedding, attention, mlp, norm, head };
std::string_view to_string(ParamGroup g);

// A parameter's shape against its shape in μP's base model (model/mup.h; the `mup` package's
// InfShape): a dimension that differs from the base is a width dimension, with multiplier
// dim / base dim. Under the standard parametrization every dimension is finite (ninf 0, all 1).
struct WidthShape {
  int ninf = 0;              // width dimensions: 2 "matrix-like", 1 "vector-like", 0 fixed
  double fan_in_mult = 1;    // of the last dimension (2-D: in), 1 when it is not a width
  double fan_out_mult = 1;   // of the first dimension (2-D: out)
};

// What a parameter is, set where it is declared (build_param_table, model/param_table.cpp).
// Code that looks for a kind of parameter (diagnostics, weight loading, the model summary) selects
// it by role and finds its partners by (site, role), never by a name suffix: the names are the
// checkpoint's and safetensors' and say nothing the table does not.
enum class ParamRole {
  other,  // not declared by build_param_table (tables built by hand in tests)
  // Matrices (out, in) of the linear maps and the embeddings
  tok_emb,    // `tok_emb.weight` (V, C); also the LM head when tied
  pos_emb,    // `pos_emb.weight` (T, C), model.pos = learned
  lm_head,    // `lm_head.weight` (V, C), untied
  attn_qkv,   // the fused query/key/value projection (Cq + 2 Ckv, C)
  attn_out,   // the attention output projection (C, Cq)
  attn_gate,  // model.attn_gate's W_g (H or Cq, C)
  mlp_in,     // the MLP input projection (F or 2F, C)
  mlp_out,    // the MLP output projection (C, F)
  linear_bias,  // the bias of one of the block's linear maps (its site: the map)
  attn_sink,    // model.attn_sink = learned's per-head logits (H)
  // A norm site's parameters (residual, final, or q/k/v: its site is the norm site)
  norm_gain,   // w
  norm_bias,   // b (model.norm_bias)
  dyt_alpha,   // DyT's and Derf's scalar alpha (the metric dyt_alpha)
  norm_shift,  // Derf's scalar shift
  // Residual path scales
  branch_scale,    // model.residual_scale's a: `<sublayer>.res_scale` (1) or (C)
  shortcut_scale,  // Admin's omega: `<sublayer>.res_omega` (C)
  ngpt_alpha,      // nGPT's eigen learning rates alpha_A / alpha_M (the metric ngpt_alpha)
  ngpt_scale,      // nGPT's stored scales s_qk, s_u, s_v, s_z
  // σReparam of a block weight (its site: the weight's linear map)
  sigma_gamma,  // the learned gamma per row block
  sigma_u,      // power-iteration vectors (buffers)
  sigma_v,
};
std::string_view to_string(ParamRole r);
// σReparam's state of a weight (gamma, u, v): derived from the weight at initialisation.
inline bool is_sigma_state(ParamRole r) {
  return r == ParamRole::sigma_gamma || r == ParamRole::sigma_u || r == ParamRole::sigma_v;
}
// The weight matrix of a linear map inside the blocks (those σReparam can reparametrize).
inline bool is_block_weight(ParamRole r) {
  return r == ParamRole::attn_qkv || r == ParamRole::attn_out || r == ParamRole::attn_gate ||
         r == ParamRole::mlp_in || r == ParamRole::mlp_out;
}

struct ParamSpec {
  std::string name;
  std::vector<std::int64_t> shape;
  long numel = 0;
  long offset = 0;          // into every arena (params, grads, optimizer moments)
  ParamInit init = ParamInit::normal;
  double init_scale = 0;    // std (normal), bound (uniform) or the value (constant)
  RowScale row_scale;       // applied after the draw, in the arena's precision
  bool decay = false;       // decoupled weight decay applies
  bool is_bias = false;
  ParamGroup group = ParamGroup::attention;
  int layer = -1;           // block index, -1 for embeddings / final norm / head
  int sublayer = -1;        // 0 attention, 1 MLP, -1 neither
  // A matrix that stacks several linear maps by rows: their row counts, in order (wqkv: Cq, Ckv,
  // Ckv for q, k, v; a gated MLP's w_in: F, F for gate and up). Empty: one map. Matrix-wise
  // optimizers (Muon) treat each block as its own matrix, as they would separate q/k/v weights.
  std::vector<std::int64_t> row_blocks;
  WidthShape width;         // against μP's base model; all 1 under the standard parametrization
  // false: state the model keeps, initialises and checkpoints (like a PyTorch buffer) but that is
  // not trained: no optimizer state, no update, no gradient, left out of gradient norms, update
  // ratios and parameter counts (σReparam's power-iteration vectors u, v, model/param_table.h).
  bool trained = true;
  UnitNorm unit_norm = UnitNorm::none;  // nGPT: restored after every optimizer step
  ParamRole role = ParamRole::other;
  // The unit it belongs to: a norm site (`blocks.0.attn.norm_in`: its gain, bias, alpha and shift)
  // or a linear map (`blocks.0.attn.wqkv`: its weight, bias and σReparam's gamma, u and v); for
  // any other parameter its own name. Per-site diagnostics are keyed by it.
  std::string site;
  bool hidden_matrix() const {  // a trained 2-D weight inside the blocks (Muon's parameters)
    return trained && shape.size() == 2 &&
           (group == ParamGroup::attention || group == ParamGroup::mlp);
  }
};

class ParamTable;

// Restores every parameter's UnitNorm constraint in the arena `params` (laid out by `table`);
// returns the number of tensors constrained.
template <class T>
int apply_unit_norms(const ParamTable& table, T* params);

class ParamTable {
 public:
  // Declares a parameter; returns its arena offset. Throws InternalError on a duplicate name.
  long add(ParamSpec spec);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // For rules applied to the whole table after it is declared (μP, model/mup.h); the names,
  // shapes and offsets must not change.
  std::vector<ParamSpec>& specs_mut() { return specs_; }
  const ParamSpec* find(std::string_view name) const;
  // The parameter of `role` at `site` (ParamSpec::site), or null.
  const ParamSpec* find(std::string_view site, ParamRole role) const;
  long total() const { return total_; }

 private:
  std::vector<ParamSpec> specs_;
  std::unordered_map<std::string, std::size_t> index_;
  long total_ = 0;
};

}  // namespace normlab
