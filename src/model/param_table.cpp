#include "model/param_table.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "model/attn_component.h"
#include "model/mup.h"
#include "model/norm_ops.h"

namespace normlab {

namespace {

// Declares the parameters of one model into a table, returning their slots.
class TableBuilder {
 public:
  TableBuilder(const ModelConfig& cfg, ParamTable& table, std::vector<SigmaSlots>& sigma)
      : cfg_(cfg), table_(table), sigma_(sigma) {}

  // The (out, in) matrix `<site>.weight` of the linear map `site`, init scaled by `scale` (and
  // rows of it by `rows`). A block weight (attention or MLP group) under model.sigma_reparam
  // brings its gamma, u and v.
  long weight(const std::string& site, ParamRole role, std::int64_t out, std::int64_t in,
              ParamGroup grp, int l, int sub, double scale, RowScale rows = {},
              std::vector<std::int64_t> row_blocks = {}) {
    const long w = matrix(site, role, out, in, grp, l, sub, scale, rows, row_blocks);
    if (cfg_.sigma_reparam && (grp == ParamGroup::attention || grp == ParamGroup::mlp))
      sigma_reparam(site, w, out, in, grp, l, sub, row_blocks);
    return w;
  }

 private:
  long matrix(const std::string& site, ParamRole role, std::int64_t out, std::int64_t in,
              ParamGroup grp, int l, int sub, double scale, RowScale rows,
              std::vector<std::int64_t> row_blocks) {
    ParamSpec s = spec(site, "weight", role, {out, in}, grp, l, sub);
    s.row_blocks = std::move(row_blocks);
    if (cfg_.init == InitKind::xavier) {
      s.init = ParamInit::uniform;
      s.init_scale = scale * std::sqrt(6.0 / static_cast<double>(in + out));
    } else {
      s.init = ParamInit::normal;
      s.init_scale = scale * cfg_.init_std;
    }
    s.row_scale = rows;
    s.decay = true;
    return table_.add(std::move(s));
  }
  // σReparam's gamma (row blocks), u (O) and v (row blocks, I) of the weight of the linear map
  // `site` at slot w: `<site>.sigma_gamma`, `.sigma_u`, `.sigma_v`.
  void sigma_reparam(const std::string& site, long w, std::int64_t out, std::int64_t in,
                     ParamGroup grp, int l, int sub, const std::vector<std::int64_t>& row_blocks) {
    SigmaSlots ss;
    ss.w = w;
    ss.out = static_cast<int>(out);
    ss.in = static_cast<int>(in);
    for (std::int64_t r : row_blocks) ss.rows.push_back(static_cast<int>(r));
    if (ss.rows.empty()) ss.rows.push_back(ss.out);
    const auto nb = static_cast<std::int64_t>(ss.rows.size());
    auto state = [&](const char* part, ParamRole role, std::vector<std::int64_t> shape,
                     bool trained) {
      ParamSpec s = spec(site, part, role, std::move(shape), grp, l, sub);
      s.init = ParamInit::constant;  // placeholders: Transformer::init_params sets them from W
      s.init_scale = trained ? 1.0 : 0.0;
      s.decay = false;
      s.trained = trained;
      return table_.add(std::move(s));
    };
    ss.gamma = state("sigma_gamma", ParamRole::sigma_gamma, {nb}, true);
    ss.u = state("sigma_u", ParamRole::sigma_u, {out}, false);
    ss.v = state("sigma_v", ParamRole::sigma_v, {nb, in}, false);
    sigma_.push_back(std::move(ss));
  }

 public:
  // A vector starting at `value` (norm gains, biases, scales), not decayed: `<site>.<part>`, or
  // `site` alone when part is empty.
  long vec(const std::string& site, const char* part, ParamRole role, std::int64_t n, double value,
           ParamGroup grp, int l, int sub, bool bias) {
    ParamSpec s = spec(site, part, role, {n}, grp, l, sub);
    s.init = ParamInit::constant;
    s.init_scale = value;
    s.decay = false;
    s.is_bias = bias;
    return table_.add(std::move(s));
  }
  // A norm site of `kind` over n values: its gain, and what norm_traits(kind) gives it (a bias
  // with model.norm_bias; DyT's and Derf's scalar alpha, starting at alpha0; Derf's shift). All in
  // the norm group, none decayed.
  NormSlots norm(const std::string& name, std::int64_t n, NormKind kind, double alpha0, int l,
                 int sub) {
    NormSlots ns;
    ns.kind = kind;
    const NormTraits t = norm_traits(kind);
    const double gain0 = 1.0 - cfg_.norm_gain_offset;  // so that (offset + w) starts at 1
    ns.on = true;
    const ParamGroup g = ParamGroup::norm;
    if (t.gain) ns.w = vec(name, "weight", ParamRole::norm_gain, n, gain0, g, l, sub, false);
    if (t.bias && cfg_.norm_bias)
      ns.b = vec(name, "bias", ParamRole::norm_bias, n, 0.0, g, l, sub, true);
    if (t.alpha) ns.alpha = vec(name, "alpha", ParamRole::dyt_alpha, 1, alpha0, g, l, sub, false);
    if (t.shift) ns.shift = vec(name, "shift", ParamRole::norm_shift, 1, 0.0, g, l, sub, false);
    return ns;
  }
  // An embedding-like (rows, C) matrix `<site>.weight` drawn from normal(embed_init_std),
  // 0 = init_std.
  long embedding(const std::string& site, ParamRole role, std::int64_t rows, ParamGroup grp) {
    ParamSpec s = spec(site, "weight", role, {rows, cfg_.d_model}, grp, -1, -1);
    s.init = ParamInit::normal;
    s.init_scale = cfg_.embed_init_std > 0 ? cfg_.embed_init_std : cfg_.init_std;
    s.decay = true;
    return table_.add(std::move(s));
  }

 private:
  // The spec `<site>.<part>` (`site` when part is empty) of role `role`.
  static ParamSpec spec(const std::string& site, std::string_view part, ParamRole role,
                        std::vector<std::int64_t> shape, ParamGroup grp, int l, int sub) {
    ParamSpec s;
    s.name = part.empty() ? site : site + "." + std::string(part);
    s.site = site;
    s.role = role;
    s.shape = std::move(shape);
    s.group = grp;
    s.layer = l;
    s.sublayer = sub;
    return s;
  }
  const ModelConfig& cfg_;
  ParamTable& table_;
  std::vector<SigmaSlots>& sigma_;
};

// The builder behind an attention component's declarations: `blocks.{l}.attn.<part>` vectors in
// the attention group, not decayed.
class AttnDeclarer final : public AttnParams {
 public:
  AttnDeclarer(TableBuilder& tb, const std::string& prefix, int l) : tb_(tb), prefix_(prefix), l_(l) {}
  long vec(std::string_view part, ParamRole role, std::int64_t n, double value) override {
    return tb_.vec(prefix_ + std::string(part), "", role, n, value, ParamGroup::attention, l_, 0,
                   false);
  }

 private:
  TableBuilder& tb_;
  const std::string& prefix_;
  int l_;
};

// Marks a declared matrix as held at unit norm along d_model (nGPT).
void unit_norm(ParamTable& t, long off, UnitNorm u) {
  for (ParamSpec& s : t.specs_mut())
    if (s.offset == off) s.unit_norm = u;
}

BlockSlots block_params(TableBuilder& tb, const ModelConfig& cfg, const ModelPlan& plan,
                        ParamTable& table, int l, double beta, double out_scale) {
  const BlockPlan& bp = plan.blocks[l];
  const int C = cfg.d_model, D = cfg.head_size(), F = cfg.d_ff;
  const NormKind nk = plan.norm_kind;
  const std::string pre = fmt::format("blocks.{}.", l);
  // The residual norms of a sublayer; DyT/Derf start at the sublayer's alpha (attention or MLP).
  auto res_norms = [&](SublayerSlots& rs, const SublayerPlan& pl, const std::string& base,
                       int sub) {
    const double a0 = sub == 0 ? cfg.dyt_alpha_attn : cfg.dyt_alpha_mlp;
    if (pl.norm_in) rs.norm_in = tb.norm(base + "norm_in", C, nk, a0, l, sub);
    if (pl.norm_out) rs.norm_out = tb.norm(base + "norm_out", C, nk, a0, l, sub);
    if (pl.norm_after_add) rs.norm_post = tb.norm(base + "norm_post", C, nk, a0, l, sub);
    const ParamGroup ng = ParamGroup::norm;
    if (pl.shortcut_scale)
      rs.omega = tb.vec(base + "res_omega", "", ParamRole::shortcut_scale, C, pl.shortcut_init, ng,
                        l, sub, false);
    if (pl.branch_scale == BranchScale::lerp)
      rs.scale = tb.vec(base + "alpha", "", ParamRole::ngpt_alpha, C, pl.branch_scale_init, ng, l,
                        sub, false);
    else if (pl.branch_scale != BranchScale::none)
      rs.scale = tb.vec(base + "res_scale", "", ParamRole::branch_scale,
                        pl.branch_scale == BranchScale::channel ? C : 1, pl.branch_scale_init, ng,
                        l, sub, false);
  };
  BlockSlots b;
  AttnSlots& at = b.attn;
  const std::string ab = pre + "attn.";
  res_norms(at.res, bp.attn, ab, 0);
  // Fused projection (Cq + 2 Ckv, C): query rows [0, Cq), key rows [Cq, Cq + Ckv), value rows
  // [Cq + Ckv, Cq + 2 Ckv). DeepNorm: the value rows get beta (queries and keys keep scale 1).
  const int Cq = cfg.q_width(), Ckv = cfg.kv_width();
  const RowScale value_rows = beta > 0 ? RowScale{static_cast<long>(Cq) + Ckv, Ckv, beta}
                                       : RowScale{};
  const ParamGroup ag = ParamGroup::attention;
  at.wqkv = tb.weight(ab + "wqkv", ParamRole::attn_qkv, Cq + 2 * Ckv, C, ag, l, 0, 1.0,
                      value_rows, {Cq, Ckv, Ckv});
  if (cfg.has_qkv_bias())
    at.bqkv = tb.vec(ab + "wqkv", "bias", ParamRole::linear_bias, Cq + 2 * Ckv, 0.0, ag, l, 0,
                     true);
  const bool per_head = plan.qk_per_head;
  const NormKind qk = plan.qk_norm_kind;
  if (plan.has_qk_norm()) {
    at.q_norm = tb.norm(ab + "q_norm", per_head ? D : Cq, qk, cfg.dyt_alpha_qk, l, 0);
    at.k_norm = tb.norm(ab + "k_norm", per_head ? D : Ckv, qk, cfg.dyt_alpha_qk, l, 0);
  }
  if (bp.attn.norm_qkv)
    at.v_norm = tb.norm(ab + "v_norm", per_head ? D : Ckv, qk, cfg.dyt_alpha_qk, l, 0);
  // Gated attention (Qiu et al. 2025): W_g maps the branch input to one gate logit per head or
  // per output value, initialised like the other input projections.
  if (cfg.attn_gate != AttnGate::none)
    at.wg = tb.weight(ab + "wg", ParamRole::attn_gate,
                      cfg.attn_gate == AttnGate::head ? cfg.n_head : Cq, C, ag, l, 0, 1.0);
  // The attention components' parameters (model/attn_component.h: the sink's logits).
  AttnDeclarer decl(tb, ab, l);
  for (const AttnComponentRow& r : attn_components())
    if (r.on(cfg)) r.declare(decl, cfg);
  if (plan.ngpt.on)
    at.s_qk = tb.vec(ab + "s_qk", "", ParamRole::ngpt_scale, Cq, plan.ngpt.s_qk.scale,
                     ParamGroup::norm, l, 0, false);
  at.wo = tb.weight(ab + "wo", ParamRole::attn_out, C, Cq, ag, l, 0, out_scale);
  if (cfg.has_out_bias())
    at.bo = tb.vec(ab + "wo", "bias", ParamRole::linear_bias, C, 0.0, ag, l, 0, true);

  MlpSlots& ml = b.mlp;
  const std::string mb = pre + "mlp.";
  res_norms(ml.res, bp.mlp, mb, 1);
  const bool gated = cfg.mlp == MlpKind::swiglu || cfg.mlp == MlpKind::geglu;
  const int F_in = gated ? 2 * F : F;
  // DeepNorm scales the MLP input projection by beta too (it is a "value-like" projection).
  const double in_scale = beta > 0 ? beta : 1.0;
  const ParamGroup mg = ParamGroup::mlp;
  ml.w_in = tb.weight(mb + "w_in", ParamRole::mlp_in, F_in, C, mg, l, 1, in_scale, {},
                      gated ? std::vector<std::int64_t>{F, F} : std::vector<std::int64_t>{});
  if (cfg.has_mlp_bias())
    ml.b_in = tb.vec(mb + "w_in", "bias", ParamRole::linear_bias, F_in, 0.0, mg, l, 1, true);
  ml.w_out = tb.weight(mb + "w_out", ParamRole::mlp_out, C, F, mg, l, 1, out_scale);
  if (cfg.has_mlp_bias())
    ml.b_out = tb.vec(mb + "w_out", "bias", ParamRole::linear_bias, C, 0.0, mg, l, 1, true);
  if (plan.ngpt.on) {
    const ParamRole sr = ParamRole::ngpt_scale;
    ml.s_u = tb.vec(mb + "s_u", "", sr, F, plan.ngpt.s_u.scale, ParamGroup::norm, l, 1, false);
    ml.s_v = tb.vec(mb + "s_v", "", sr, F, plan.ngpt.s_v.scale, ParamGroup::norm, l, 1, false);
    unit_norm(table, at.wqkv, UnitNorm::rows);
    unit_norm(table, at.wo, UnitNorm::cols);
    unit_norm(table, ml.w_in, UnitNorm::rows);
    unit_norm(table, ml.w_out, UnitNorm::cols);
  }
  return b;
}

}  // namespace

ParamLayout build_param_table(const ModelConfig& cfg, const ModelPlan& plan) {
  ParamLayout out;
  ModelSlots& sl = out.slots;
  TableBuilder tb(cfg, out.table, sl.sigma);
  const int C = cfg.d_model, V = cfg.vocab_size, L = cfg.n_layer;
  // Residual output projections: GPT-2 scales by 1/sqrt(2L); DeepNorm by beta instead.
  double out_scale = 1.0;
  if (plan.deepnorm_beta > 0)
    out_scale = plan.deepnorm_beta;
  else if (cfg.init == InitKind::gpt2)
    out_scale = 1.0 / std::sqrt(2.0 * L);

  sl.tok_emb = tb.embedding("tok_emb", ParamRole::tok_emb, V, ParamGroup::embedding);
  if (cfg.pos == PosKind::learned)
    sl.pos_emb = tb.embedding("pos_emb", ParamRole::pos_emb, cfg.seq_len, ParamGroup::embedding);
  for (int l = 0; l < L; ++l)
    sl.blocks.push_back(
        block_params(tb, cfg, plan, out.table, l, plan.deepnorm_beta, out_scale));
  if (plan.final_norm)
    sl.final_norm = tb.norm("final_norm", C, plan.norm_kind, cfg.dyt_alpha_final, -1, -1);
  if (cfg.tie_embeddings) {
    sl.lm_head = sl.tok_emb;
  } else if (cfg.init == InitKind::xavier) {
    sl.lm_head = tb.weight("lm_head", ParamRole::lm_head, V, C, ParamGroup::head, -1, -1, 1.0);
  } else {
    sl.lm_head = tb.embedding("lm_head", ParamRole::lm_head, V, ParamGroup::head);
  }
  if (plan.ngpt.on) {
    sl.s_z = tb.vec("s_z", "", ParamRole::ngpt_scale, V, plan.ngpt.s_z.scale, ParamGroup::norm, -1,
                    -1, false);
    unit_norm(out.table, sl.tok_emb, UnitNorm::rows);
    unit_norm(out.table, sl.lm_head, UnitNorm::rows);
  }
  apply_mup(out.table, cfg);
  return out;
}

}  // namespace normlab
