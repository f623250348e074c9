#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "model/attn_component.h"
#include "model/model_detail.h"
#include "model/mup.h"
#include "normlab/errors.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/glu.h"
#include "ops/linear.h"
#include "ops/ngpt.h"
#include "ops/rope.h"
#include "ops/softcap.h"
#include "tensor/rng.h"
#include "tensor/threading.h"

namespace normlab {

using namespace model_detail;


template <class T>
Transformer<T>::~Transformer() = default;

template <class T>
Transformer<T>::Transformer(const ModelConfig& cfg, int max_batch, int max_seq, bool allocate)
    : cfg_(cfg), plan_(build_plan(cfg)), maxB_(max_batch), maxT_(max_seq) {
  NL_CHECK(max_batch > 0 && max_seq > 0 && max_seq <= cfg.seq_len,
           "batch {} x seq {} does not fit model.seq_len = {}", max_batch, max_seq, cfg.seq_len);
  {
    ParamLayout layout = build_param_table(cfg_, plan_);
    table_ = std::move(layout.table);
    tok_emb_ = layout.slots.tok_emb;
    pos_emb_ = layout.slots.pos_emb;
    lm_head_ = layout.slots.lm_head;
    s_z_ = layout.slots.s_z;
    final_norm_ = layout.slots.final_norm;
    blocks_ = std::move(layout.slots.blocks);
    sigma_ = std::move(layout.slots.sigma);
  }
  if (!blocks_.empty() && blocks_[0].attn.wg != kNone)
    gate_mult_ = static_cast<T>(
        readout_like_multiplier(table_.specs()[spec_at(table_, blocks_[0].attn.wg)]));
  if (allocate) {
    params_.assign(table_.total(), T(0));
    grads_.assign(table_.total(), T(0));
  }
  if (!sigma_.empty()) {
    sigma_site_.assign(table_.specs().size(), -1);
    for (std::size_t k = 0; k < sigma_.size(); ++k) {
      const SigmaSlots& ss = sigma_[k];
      sigma_site_[spec_at(table_, ss.w)] = static_cast<int>(k);
      sigma_val_off_.push_back(static_cast<int>(sigma_val_.size()));
      sigma_val_.resize(sigma_val_.size() + ss.rows.size(), 1.0);
    }
  }

  for (int l = 0; l < cfg_.n_layer; ++l) {
    const bool sliding = cfg_.layer_sliding(l);
    layers_.push_back({sliding ? cfg_.sliding_window : 0, sliding && cfg_.rope_local_theta > 0});
  }

  // QK path: the plan's stages (norm, RoPE, nGPT's s_qk) on queries and keys.
  const bool rope = cfg_.pos == PosKind::rope;
  qk_stages_ = plan_.qk_stages;

  // Size the activation arena once: first pass counts, second pass assigns.
  const long N = static_cast<long>(max_batch) * max_seq;
  const int H = cfg_.n_head, D = cfg_.head_size(), V = cfg_.vocab_size, L = cfg_.n_layer;
  head_chunk_ = head_chunk_rows(N, V);
  head_chunk_alloc_ = head_chunk_;
  for (int pass = 0; pass < (allocate ? 2 : 1); ++pass) {
    arena_used_ = 0;
    layout_activations(N);
    layout_backward_scratch(N);
    if (pass == 0 && allocate) arena_.assign(arena_used_, T(0));
  }
  stats_.resid_rms.assign(2 * L + 1, 0.0);
  stats_.resid_max.assign(2 * L + 1, 0.0);
  stats_.branch_rms.assign(2 * L, 0.0);
  stats_.attn_max_logit.assign(L, 0.0);
  stats_.attn_entropy.assign(L, 0.0);
  stats_.gate_logit_rms.assign(gate_width() > 0 ? L : 0, 0.0);
  stats_.attn_first_mass.assign(L, 0.0);
  stats_.attn_max_logit_head.assign(static_cast<long>(L) * H, 0.0);
  stats_.norm_saturated.assign(table_.specs().size(), std::nan(""));
  if (allocate) {
    attn_stat_max_.assign(static_cast<long>(L) * max_batch * H, T(0));
    attn_stat_ent_.assign(static_cast<long>(L) * max_batch * H, T(0));
    attn_stat_first_.assign(static_cast<long>(L) * max_batch * H, T(0));
    attn_stat_sink_.assign(static_cast<long>(L) * max_batch * H, T(0));
  }
  attn_parts_ = make_attn_components<T>(table_, cfg_, max_batch, allocate);
  // A sink's mass per layer, when a component puts a sink in the softmax.
  stats_.attn_sink_mass.assign(allocate && L > 0 && attn_scores(0).sink != nullptr ? L : 0, 0.0);
  if (rope && allocate) {
    ops::rope_tables(rope_cos_, rope_sin_, cfg_.seq_len, D, cfg_.rope_theta, rope_scale(cfg_));
    if (rope_cos_local_)
      ops::rope_tables(rope_cos_local_, rope_sin_local_, cfg_.seq_len, D, cfg_.rope_local_theta);
  }
}

// The forward activations in the arena (alloc() counts on the first pass and assigns on the
// second): the 2L+1 residual states, per layer the sublayers' norm caches and branch outputs,
// q/k/v with the QK stages, attention log-sum-exp and merged heads, the MLP hidden states, the
// final norm, σReparam's W_hat, and the RoPE tables.
template <class T>
void Transformer<T>::layout_activations(long N) {
  const int C = cfg_.d_model, H = cfg_.n_head, Hkv = cfg_.kv_heads(), D = cfg_.head_size(),
            F = cfg_.d_ff, L = cfg_.n_layer, Cq = cfg_.q_width(), Ckv = cfg_.kv_width();
  const int F_in = gated(cfg_.mlp) ? 2 * F : F;
  res_.assign(2 * L + 1, nullptr);
  for (auto& r : res_) r = alloc(N * C);
  attn_acts_.assign(L, {});
  mlp_acts_.assign(L, {});
  for (int l = 0; l < L; ++l) {
    AttnActs& a = attn_acts_[l];
    alloc_sublayer(a.res, plan_.blocks[l].attn, N);
    a.qkv = alloc(N * (Cq + 2 * Ckv));
    if (!qk_stages_.empty())
      for (std::size_t st = 0; st <= qk_stages_.size(); ++st) {
        a.qs[st] = alloc(N * Cq);
        a.ks[st] = alloc(N * Ckv);
      }
    const bool per_head = plan_.qk_per_head;
    if (std::count(qk_stages_.begin(), qk_stages_.end(), QkStage::norm) > 0) {
      a.qn.mean = alloc(per_head ? N * H : N);
      a.qn.rstd = alloc(per_head ? N * H : N);
      a.kn.mean = alloc(per_head ? N * Hkv : N);
      a.kn.rstd = alloc(per_head ? N * Hkv : N);
    }
    if (plan_.blocks[l].attn.norm_qkv) {  // HybridNorm's value norm: raw copy, output, statistics
      a.v_raw = alloc(N * Ckv);
      alloc_norm(a.vn, true, per_head ? N * Hkv : N, per_head ? D : Ckv);
    }
    a.lse = alloc(static_cast<long>(maxB_) * H * maxT_);
    a.o = alloc(N * Cq);
    if (gate_width() > 0) {
      a.gate = alloc(N * H * gate_width());
      a.og = alloc(N * Cq);
    }
    MlpActs& m = mlp_acts_[l];
    alloc_sublayer(m.res, plan_.blocks[l].mlp, N);
    m.h = alloc(N * F_in);
    m.hs = plan_.ngpt.on ? alloc(N * F_in) : nullptr;
    m.a = alloc(N * F);
  }
  alloc_norm(final_cache_, plan_.final_norm, N, C);
  // σReparam: each weight's W_hat (O, I), computed at the start of every forward pass.
  sigma_hat_.assign(sigma_.size(), nullptr);
  for (std::size_t k = 0; k < sigma_.size(); ++k)
    sigma_hat_[k] = alloc(static_cast<long>(sigma_[k].out) * sigma_[k].in);
  if (cfg_.pos == PosKind::rope) {
    rope_cos_ = alloc(static_cast<long>(cfg_.seq_len) * D / 2);
    rope_sin_ = alloc(static_cast<long>(cfg_.seq_len) * D / 2);
    // Sliding layers with a base of their own (Gemma 3's local RoPE): a second pair of tables.
    rope_cos_local_ = rope_sin_local_ = nullptr;
    bool local = false;
    for (const LayerAttn& la : layers_) local = local || la.local_rope;
    if (local) {
      rope_cos_local_ = alloc(static_cast<long>(cfg_.seq_len) * D / 2);
      rope_sin_local_ = alloc(static_cast<long>(cfg_.seq_len) * D / 2);
    }
  }
}

template <class T>
void Transformer<T>::alloc_sublayer(SublayerActs& a, const SublayerPlan& pl, long N) {
  const int C = cfg_.d_model;
  alloc_norm(a.in, pl.norm_in, N, C);
  a.f = alloc(N * C);
  alloc_norm(a.out, pl.norm_out, N, C);
  if (pl.norm_after_add) a.s = alloc(N * C);
  // The norm_post output is the next residual state; only its statistics live here.
  if (pl.norm_after_add) {
    a.post.mean = alloc(N);
    a.post.rstd = alloc(N);
  }
}

// The backward scratch (reused by every layer) and the LM head's chunk buffers.
template <class T>
void Transformer<T>::layout_backward_scratch(long N) {
  const int C = cfg_.d_model, F = cfg_.d_ff, V = cfg_.vocab_size;
  const int F_in = gated(cfg_.mlp) ? 2 * F : F;
  const int Cq = cfg_.q_width(), Ckv = cfg_.kv_width();
  const long wide = std::max<long>({N * (Cq + 2 * Ckv), N * F_in});
  d_resid_a_ = alloc(N * C);
  d_resid_b_ = alloc(N * C);
  d_post_in_ = alloc(N * C);
  d_branch_out_ = alloc(N * C);
  d_branch_in_ = alloc(N * C);
  d_qkv_ = alloc(wide);
  d_q_ = alloc(N * Cq);
  d_k_ = alloc(N * Ckv);
  d_heads_ = alloc(N * Cq);
  d_ungated_ = gate_width() > 0 ? alloc(N * Cq) : nullptr;
  d_gate_ = gate_width() > 0 ? alloc(N * cfg_.n_head * gate_width()) : nullptr;
  // Cq >= Ckv: one size serves the query and the key stages.
  d_qk_stage_a_ = qk_stages_.size() > 0 ? alloc(N * Cq) : nullptr;
  d_qk_stage_b_ = qk_stages_.size() > 1 ? alloc(N * Cq) : nullptr;
  bool v_norm = false;
  for (const BlockPlan& b : plan_.blocks) v_norm = v_norm || b.attn.norm_qkv;
  d_v_ = v_norm ? alloc(N * Ckv) : nullptr;
  d_v_raw_ = v_norm ? alloc(N * Ckv) : nullptr;
  d_mlp_h_ = alloc(N * F_in);
  d_mlp_act_ = alloc(N * F);
  long largest = 0;  // σReparam: dL/dW_hat of one weight at a time
  for (const SigmaSlots& ss : sigma_) largest = std::max(largest, static_cast<long>(ss.out) * ss.in);
  sigma_dw_hat_ = largest > 0 ? alloc(largest) : nullptr;
  d_final_ = alloc(N * C);
  head_logits_ = alloc(static_cast<long>(head_chunk_alloc_) * V);
  // Without a final cap the gradient overwrites the logits in place (no second buffer).
  head_dlogits_ =
      cfg_.final_softcap > 0 ? alloc(static_cast<long>(head_chunk_alloc_) * V) : nullptr;
  head_lse_ = alloc(head_chunk_alloc_);
  head_raw_ = s_z_ != kNone ? alloc(static_cast<long>(head_chunk_alloc_) * V) : nullptr;
}

template <class T>
T* Transformer<T>::alloc(long n) {
  const long off = (arena_used_ + 15) / 16 * 16;
  arena_used_ = off + n;
  return arena_.empty() ? nullptr : arena_.data() + off;
}

template <class T>
void Transformer<T>::alloc_norm(NormCache& c, bool present, long rows, int width) {
  c = {};
  if (!present) return;
  c.out = alloc(rows * width);
  c.mean = alloc(rows);
  c.rstd = alloc(rows);
}

template <class T>
void Transformer<T>::init_params(std::uint64_t seed) {
  Rng rng(seed);
  std::fill(params_.begin(), params_.end(), T(0));
  for (const ParamSpec& s : table_.specs()) {
    T* w = params_.data() + s.offset;
    for (long i = 0; i < s.numel; ++i) {
      switch (s.init) {
        case ParamInit::normal: w[i] = static_cast<T>(rng.normal() * s.init_scale); break;
        case ParamInit::uniform: w[i] = static_cast<T>((2 * rng.uniform() - 1) * s.init_scale); break;
        case ParamInit::constant: w[i] = static_cast<T>(s.init_scale); break;
      }
    }
    const RowScale& rs = s.row_scale;
    if (rs.rows > 0) {
      const long cols = s.numel / s.shape[0];
      T* r = w + rs.row0 * cols;
      for (long i = 0; i < rs.rows * cols; ++i) r[i] *= static_cast<T>(rs.scale);
    }
  }
  // nGPT's matrices start on the unit sphere as the optimizer keeps them (UnitNorm).
  apply_unit_norms(table_, params_.data());
  init_sigma_reparam();  // from the weights as drawn; W_hat = W before Admin's pass reads it
  if (plan_.admin_profile) {
    std::vector<int> idx(static_cast<std::size_t>(maxB_) * maxT_);
    const int V = cfg_.vocab_size;
    for (int& t : idx) t = std::min(V - 1, static_cast<int>(rng.uniform() * V));
    admin_profile(idx.data(), maxB_, maxT_);
  }
}

template <class T>
void Transformer<T>::zero_grad() {
  unfilled_.assign(table_.specs().size(), 1);
}

namespace {
template <class T>
void zero_fill(T* g, long n) {
  parallel_for(n, 1L << 16, [&](long b, long e) { std::memset(g + b, 0, sizeof(T) * (e - b)); });
}
}  // namespace

template <class T>
T* Transformer<T>::g(long off) {
  if (off == kNone) return nullptr;
  if (!unfilled_.empty()) {
    const std::size_t i = spec_at(table_, off);
    if (unfilled_[i]) {
      zero_fill(grads_.data() + off, table_.specs()[i].numel);
      unfilled_[i] = 0;
    }
  }
  return grads_.data() + off;
}

template <class T>
ops::Accum Transformer<T>::grad_accum(long off) {
  if (off == kNone || unfilled_.empty()) return ops::Accum::add;
  const std::size_t i = spec_at(table_, off);
  if (!unfilled_[i]) return ops::Accum::add;
  unfilled_[i] = 0;
  return ops::Accum::overwrite;
}

template <class T>
void Transformer<T>::settle_grads() const {
  const auto& sp = table_.specs();
  for (std::size_t i = 0; i < unfilled_.size(); ++i)
    if (unfilled_[i]) zero_fill(grads_.data() + sp[i].offset, sp[i].numel);
  unfilled_.clear();
}

// ---------------------------------------------------------------------------------------------
// Attention branch

template <class T>
void Transformer<T>::check_tokens(const int* ids, long n, const char* what) const {
  for (long i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      throw InputError(fmt::format("{} id {} at position {} is outside the vocabulary [0, {})",
                                   what, ids[i], i, cfg_.vocab_size));
}

template <class T>
void Transformer<T>::embed(const int* idx, int B, int Tn) {
  if (B <= 0 || Tn <= 0 || B > maxB_ || Tn > maxT_)
    throw InputError(fmt::format("batch of {} x {} tokens does not fit the model's {} x {} "
                                 "(model.seq_len = {})", B, Tn, maxB_, maxT_, cfg_.seq_len));
  check_tokens(idx, static_cast<long>(B) * Tn, "token");
  B_ = B;
  T_ = Tn;
  idx_ = idx;
  ops::embedding_forward(res_[0], idx, p(tok_emb_), p(pos_emb_), B, Tn, cfg_.d_model,
                         static_cast<T>(cfg_.embed_scale), pos0_);
}

template <class T>
void Transformer<T>::body_forward(int l_begin, int l_end) {
  const long N = static_cast<long>(B_) * T_;
  for (int l = l_begin; l < l_end; ++l) {
    const BlockPlan& bp = plan_.blocks[l];
    sublayer_forward(bp.attn, blocks_[l].attn.res, attn_acts_[l].res, res_[2 * l], res_[2 * l + 1],
                     true, l);
    sublayer_forward(bp.mlp, blocks_[l].mlp.res, mlp_acts_[l].res, res_[2 * l + 1],
                     res_[2 * l + 2], false, l);
    if (collect_stats_) {
      stats_.branch_rms[2 * l] = sum_sq_max(attn_acts_[l].res.f, N * cfg_.d_model).rms;
      stats_.branch_rms[2 * l + 1] = sum_sq_max(mlp_acts_[l].res.f, N * cfg_.d_model).rms;
    }
  }
  if (collect_stats_) {
    for (int k = 2 * l_begin; k <= 2 * l_end; ++k) {
      const SizeStats st = sum_sq_max(res_[k], N * cfg_.d_model);
      stats_.resid_rms[k] = st.rms;
      stats_.resid_max[k] = st.max_abs;
    }
  }
}

// bf16 products exist for float models only (double models are for gradient checks).
template <class T>
static GemmPrecision supported_precision(GemmPrecision prec) {
  if (!std::is_same_v<T, float> && prec != GemmPrecision::float32)
    throw InputError("matmul precision bf16 is for float models; this model is double");
  return prec;
}

template <class T>
void Transformer<T>::set_matmul_precision(GemmPrecision prec) {
  mm_ = mm_head_ = supported_precision<T>(prec);
}

template <class T>
void Transformer<T>::set_head_matmul_precision(GemmPrecision prec) {
  mm_head_ = supported_precision<T>(prec);
}

template <class T>
void Transformer<T>::set_head_chunk(int rows) {
  NL_CHECK(rows >= 1 && rows <= head_chunk_alloc_, "head chunk of {} rows: the buffers hold 1..{}",
           rows, head_chunk_alloc_);
  head_chunk_ = rows;
}

template <class T>
const T* Transformer<T>::final_hidden() const {
  return plan_.final_norm ? final_cache_.out : res_[2 * cfg_.n_layer];
}

template <class T>
LossStats Transformer<T>::forward(const int* idx, const int* targets, int B, int Tn,
                                  double z_alpha, bool need_grad, double grad_scale) {
  sigma_refresh();
  embed(idx, B, Tn);
  check_tokens(targets, static_cast<long>(B) * Tn, "target");
  body_forward(0, cfg_.n_layer);
  const long N = static_cast<long>(B) * Tn;
  const int C = cfg_.d_model, V = cfg_.vocab_size;
  if (plan_.final_norm) norm_forward(final_cache_, final_norm_, res_[2 * cfg_.n_layer], N, C);
  const T* xf = final_hidden();
  const T* W = p(lm_head_);
  const T cap = static_cast<T>(cfg_.final_softcap);
  const T head_mult = static_cast<T>(plan_.readout_mult);  // μP's readout multiplier; 1 otherwise
  const T sz_mult = static_cast<T>(plan_.ngpt.s_z.mult());
  double ce = 0, lsq = 0, lse_sum = 0, lse_max = -1e300, max_raw = 0, max_capped = 0, logits_ss = 0;
  T* lse = head_lse_;
  // The head's weight gradient: the first chunk overwrites it when zero_grad() left it unfilled.
  T* dW = need_grad ? g_raw(lm_head_) : nullptr;
  T dW_beta = need_grad && grad_accum(lm_head_) == ops::Accum::overwrite ? T(0) : T(1);
  for (long r0 = 0; r0 < N; r0 += head_chunk_) {
    const int rows = static_cast<int>(std::min<long>(head_chunk_, N - r0));
    T* logits = head_logits_;
    gemm_p<T>(mm_head_, false, true, rows, V, C, head_mult, xf + r0 * C, C, W, C, T(0), logits, V);
    const long RV = static_cast<long>(rows) * V;
    if (s_z_ != kNone) {  // nGPT: z = s_z (.) (h . e), the raw logits kept for ds_z
      std::memcpy(head_raw_, logits, sizeof(T) * RV);
      ops::channel_scale_forward(logits, V, logits, V, p(s_z_), sz_mult, rows, V);
    }
    if (collect_stats_) {
      const SizeStats st = sum_sq_max(logits, static_cast<long>(rows) * V);
      max_raw = std::fmax(max_raw, st.max_abs);
      logits_ss += st.sum_sq;
    }
    if (cap > 0) ops::softcap_forward(logits, logits, static_cast<long>(rows) * V, cap);
    if (collect_stats_) max_capped = std::fmax(max_capped, max_abs(logits, static_cast<long>(rows) * V));
    T* dl = need_grad ? (cap > 0 ? head_dlogits_ : logits) : nullptr;
    const auto sums = ops::cross_entropy_forward_backward(
        dl, lse, logits, targets + r0, rows, V, static_cast<T>(z_alpha),
        static_cast<T>(grad_scale / N));
    ce += sums.ce;
    lsq += sums.lse_sq;
    for (int r = 0; r < rows; ++r) {
      lse_sum += lse[r];
      lse_max = std::fmax(lse_max, static_cast<double>(lse[r]));
    }
    if (need_grad) {
      if (cap > 0) ops::softcap_backward(dl, dl, logits, static_cast<long>(rows) * V, cap);
      if (s_z_ != kNone)
        ops::channel_scale_backward(dl, V, g(s_z_), dl, V, head_raw_, V, p(s_z_), sz_mult, rows, V);
      gemm_p<T>(mm_head_, false, false, rows, C, V, head_mult, dl, V, W, C, T(0), d_final_ + r0 * C, C);
      gemm_p<T>(mm_head_, true, false, V, C, rows, head_mult, dl, V, xf + r0 * C, C, dW_beta, dW, C);
      dW_beta = T(1);
    }
  }
  head_grad_done_ = need_grad;
  LossStats st;
  st.tokens = N;
  st.ce = ce / N;
  st.z_loss = z_alpha * lsq / N;
  st.loss = st.ce + st.z_loss;
  st.lse_mean = lse_sum / N;
  if (collect_stats_) {
    stats_.log_z_mean = st.lse_mean;
    stats_.log_z_std = std::sqrt(std::fmax(0.0, lsq / N - st.lse_mean * st.lse_mean));
    stats_.log_z_max = lse_max;
    stats_.max_logit = max_capped;
    stats_.max_logit_raw = max_raw;
    stats_.logits_rms = std::sqrt(logits_ss / (static_cast<double>(N) * V));
  }
  return st;
}

template <class T>
void Transformer<T>::backward() {
  NL_CHECK(head_grad_done_, "backward() needs a preceding forward(..., need_grad = true)");
  head_grad_done_ = false;
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model, L = cfg_.n_layer;
  T* dcur = d_resid_a_;
  if (plan_.final_norm) {
    norm_backward(final_cache_, final_norm_, res_[2 * L], d_final_, dcur, N, C,
                  ops::Accum::overwrite);
  } else {
    std::memcpy(dcur, d_final_, sizeof(T) * N * C);
  }
  T* dnext = d_resid_b_;
  for (int l = L - 1; l >= 0; --l) {
    const BlockPlan& bp = plan_.blocks[l];
    sublayer_backward(bp.mlp, blocks_[l].mlp.res, mlp_acts_[l].res, res_[2 * l + 1], dcur, dnext,
                      false, l);
    std::swap(dcur, dnext);
    sublayer_backward(bp.attn, blocks_[l].attn.res, attn_acts_[l].res, res_[2 * l], dcur, dnext,
                      true, l);
    std::swap(dcur, dnext);
  }
  ops::embedding_backward(g(tok_emb_), g(pos_emb_), dcur, idx_, B_, T_, C,
                          static_cast<T>(cfg_.embed_scale));
}

template <class T>
void Transformer<T>::block_forward(int l, const T* x, T* y, int B, int Tn) {
  NL_CHECK(l >= 0 && l < cfg_.n_layer, "block {} out of range", l);
  NL_CHECK(B <= maxB_ && Tn <= maxT_, "block input too large");
  B_ = B;
  T_ = Tn;
  const long n = static_cast<long>(B) * Tn * cfg_.d_model;
  sigma_refresh();
  std::memcpy(res_[2 * l], x, sizeof(T) * n);
  body_forward(l, l + 1);
  std::memcpy(y, res_[2 * l + 2], sizeof(T) * n);
}

template <class T>
void Transformer<T>::block_backward(int l, const T* dy, T* dx) {
  const BlockPlan& bp = plan_.blocks[l];
  sublayer_backward(bp.mlp, blocks_[l].mlp.res, mlp_acts_[l].res, res_[2 * l + 1], dy, d_resid_b_,
                    false, l);
  sublayer_backward(bp.attn, blocks_[l].attn.res, attn_acts_[l].res, res_[2 * l], d_resid_b_, dx,
                    true, l);
}

template class Transformer<float>;
template class Transformer<double>;

}  // namespace normlab
