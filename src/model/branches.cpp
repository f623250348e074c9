// The two branches of a block, forward and backward: attention (QKV projection, QK-norm and
// RoPE stages, tiled causal attention with the optional soft-cap and sink, the optional output
// gate, output projection) and the MLP (plain or gated). The residual update around them is
// sublayer.cpp's sublayer routine. Linear layers read their weights through weight() and write
// their weight gradients through weight_grad() / finish_weight_grad(), which are the plain
// parameter and gradient unless the weight is σReparam's (model/sigma_reparam.cpp).
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/attn_component.h"
#include "model/model_detail.h"
#include "normlab/errors.h"
#include "ops/activation.h"
#include "ops/attn_gate.h"
#include "ops/attention.h"
#include "ops/glu.h"
#include "ops/linear.h"
#include "ops/ngpt.h"
#include "ops/rope.h"
#include "tensor/threading.h"

namespace normlab {

using namespace model_detail;

template <class T>
ops::AttnScores<T> Transformer<T>::attn_scores(int l) const {
  ops::AttnScores<T> s{.scale = static_cast<T>(plan_.attn_scale),
                       .cap = static_cast<T>(cfg_.attn_softcap),
                       .window = layers_[l].window};
  for (const auto& c : attn_parts_) c->scores(l, params_.data(), s);
  return s;
}

template <class T>
int Transformer<T>::gate_width() const {
  switch (cfg_.attn_gate) {
    case AttnGate::none: return 0;
    case AttnGate::head: return 1;
    case AttnGate::elementwise: return cfg_.head_size();
  }
  return 0;
}

template <class T>
void Transformer<T>::attn_forward(int l, const T* u, T* f) {
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model, H = cfg_.n_head, Hkv = cfg_.kv_heads(), D = cfg_.head_size();
  const int Cq = cfg_.q_width(), Ckv = cfg_.kv_width(), W3 = Cq + 2 * Ckv;
  const AttnSlots& s = blocks_[l].attn;
  AttnActs& a = attn_acts_[l];
  ops::linear_forward(a.qkv, u, weight(s.wqkv), p(s.bqkv), static_cast<int>(N), C, W3, mm_);
  if (!qk_stages_.empty()) {
    gather_cols(a.qs[0], a.qkv, N, Cq, W3, 0);
    gather_cols(a.ks[0], a.qkv, N, Ckv, W3, Cq);
  }
  const bool head = plan_.qk_per_head;
  const T sqk_mult = static_cast<T>(plan_.ngpt.s_qk.mult());
  for (std::size_t st = 0; st < qk_stages_.size(); ++st) {
    switch (qk_stages_[st]) {
      case QkStage::norm: {
        NormCache qc{a.qs[st + 1], a.qn.mean, a.qn.rstd}, kc{a.ks[st + 1], a.kn.mean, a.kn.rstd};
        norm_forward(qc, s.q_norm, a.qs[st], head ? N * H : N, head ? D : Cq);
        norm_forward(kc, s.k_norm, a.ks[st], head ? N * Hkv : N, head ? D : Ckv);
        break;
      }
      case QkStage::rope:
        ops::rope_forward(a.qs[st + 1], a.qs[st], rope_cos(l), rope_sin(l), B_, T_, H, D, pos0_);
        ops::rope_forward(a.ks[st + 1], a.ks[st], rope_cos(l), rope_sin(l), B_, T_, Hkv, D, pos0_);
        break;
      case QkStage::scale:  // nGPT's s_qk, one per channel, on queries and keys alike
        ops::channel_scale_forward(a.qs[st + 1], Cq, a.qs[st], Cq, p(s.s_qk), sqk_mult, N, Cq);
        ops::channel_scale_forward(a.ks[st + 1], Ckv, a.ks[st], Ckv, p(s.s_qk), sqk_mult, N, Ckv);
        break;
    }
  }
  const QkView qk = qk_view(l);
  // Values: read in place (stride W3), or gathered and normalised (HybridNorm's v_norm; RoPE never
  // touches them).
  const T* v = a.qkv + Cq + Ckv;
  int ldv = W3;
  if (plan_.blocks[l].attn.norm_qkv) {
    gather_cols(a.v_raw, a.qkv, N, Ckv, W3, Cq + Ckv);
    norm_forward(a.vn, s.v_norm, a.v_raw, head ? N * Hkv : N, head ? D : Ckv);
    v = a.vn.out;
    ldv = Ckv;
  }
  const ops::AttnShape shape{B_, T_, H, Hkv, D};
  const ops::AttnScores<T> scores = attn_scores(l);
  if (kv_) {
    // Append this pass's keys and values to the cache, then attend over everything cached.
    const long lay = static_cast<long>(l) * cfg_.seq_len * Ckv;
    T* kc = kv_->k.data() + lay + static_cast<long>(pos0_) * Ckv;
    T* vc = kv_->v.data() + lay + static_cast<long>(pos0_) * Ckv;
    for (long r = 0; r < N; ++r) {
      std::memcpy(kc + r * Ckv, qk.k + r * qk.ldk, sizeof(T) * Ckv);
      std::memcpy(vc + r * Ckv, v + r * ldv, sizeof(T) * Ckv);
    }
    const T* q = qk.q;
    if (qk.ldq != Cq) {  // the cached kernel wants contiguous queries: d_q_ is free while decoding
      gather_cols(d_q_, a.qkv, N, Cq, W3, 0);
      q = d_q_;
    }
    ops::attention_forward_kv(a.o, kv_->scratch.data(), q, kv_->k.data() + lay,
                              kv_->v.data() + lay, pos0_, shape, scores);
  } else {
    const long BH = static_cast<long>(B_) * H;
    const bool maxima = collect_stats_ || collect_attn_max_;
    T* st_max = maxima ? attn_stat_max_.data() + l * BH : nullptr;
    T* st_ent = collect_stats_ ? attn_stat_ent_.data() + l * BH : nullptr;
    T* st_first = collect_stats_ ? attn_stat_first_.data() + l * BH : nullptr;
    T* st_sink = collect_stats_ ? attn_stat_sink_.data() + l * BH : nullptr;
    ops::attention_forward_tiled({a.o, Cq}, a.lse, {{qk.q, qk.ldq}, {qk.k, qk.ldk}, {v, ldv}},
                                 shape, scores, {st_max, st_ent, st_first, st_sink});
    if (maxima) {
      double mx = 0;
      for (int h = 0; h < H; ++h) {
        double mh = 0;
        for (int b = 0; b < B_; ++b) mh = std::fmax(mh, st_max[b * H + h]);
        stats_.attn_max_logit_head[static_cast<long>(l) * H + h] = mh;
        mx = std::fmax(mx, mh);
      }
      stats_.attn_max_logit[l] = mx;
    }
    if (collect_stats_) {
      double ent = 0;
      for (long i = 0; i < BH; ++i) ent += st_ent[i];
      stats_.attn_entropy[l] = ent / (static_cast<double>(BH) * T_);
      double first = 0, sunk = 0;
      for (long i = 0; i < BH; ++i) first += st_first[i], sunk += st_sink[i];
      stats_.attn_first_mass[l] = T_ > 1 ? first / (static_cast<double>(BH) * (T_ - 1)) : 0.0;
      if (!stats_.attn_sink_mass.empty())
        stats_.attn_sink_mass[l] = sunk / (static_cast<double>(BH) * T_);
    }
  }
  const T* heads = a.o;
  if (const int G = gate_width(); G > 0) {
    // Gated attention: gate logits gate_mult u W_g^T (N, H G), then o' = sigmoid(.) (.) o.
    ops::linear_forward(a.gate, u, weight(s.wg), static_cast<const T*>(nullptr),
                        static_cast<int>(N), C, H * G, mm_);
    const long NG = N * H * G;
    if (gate_mult_ != T(1))
      for (long i = 0; i < NG; ++i) a.gate[i] *= gate_mult_;
    if (collect_stats_) stats_.gate_logit_rms[l] = sum_sq_max(a.gate, NG).rms;
    ops::attn_gate_forward(a.og, a.gate, a.o, N, H, D, G);
    heads = a.og;
  }
  ops::linear_forward(f, heads, weight(s.wo), p(s.bo), static_cast<int>(N), Cq, C, mm_);
}

template <class T>
typename Transformer<T>::QkView Transformer<T>::qk_view(int l) const {
  const AttnActs& a = attn_acts_[l];
  const int Cq = cfg_.q_width(), Ckv = cfg_.kv_width(), W3 = Cq + 2 * Ckv;
  if (qk_stages_.empty()) return {a.qkv, a.qkv + Cq, W3, W3};
  const std::size_t last = qk_stages_.size();
  return {a.qs[last], a.ks[last], Cq, Ckv};
}

template <class T>
void Transformer<T>::attn_backward(int l, const T* u, const T* df, T* du, ops::Accum du_accum) {
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model, H = cfg_.n_head, Hkv = cfg_.kv_heads(), D = cfg_.head_size();
  const int Cq = cfg_.q_width(), Ckv = cfg_.kv_width(), W3 = Cq + 2 * Ckv;
  const AttnSlots& s = blocks_[l].attn;
  AttnActs& a = attn_acts_[l];
  const int G = gate_width();
  const WeightGrad dwo = weight_grad(s.wo);
  ops::linear_backward(d_heads_, dwo.dw, g(s.bo), df, G > 0 ? a.og : a.o, weight(s.wo),
                       static_cast<int>(N), Cq, C, ops::Accum::overwrite, mm_, dwo.accum);
  finish_weight_grad(s.wo);
  // Through the gate: d o = gate (.) d o', and the gate logits' gradient d_gate_ (N, H G).
  const T* d_o = d_heads_;
  if (G > 0) {
    ops::attn_gate_backward(d_ungated_, d_gate_, d_heads_, a.gate, a.o, N, H, D, G);
    d_o = d_ungated_;
    // z = gate_mult u W_g^T: the multiplier carries into d(u W_g^T).
    if (gate_mult_ != T(1))
      for (long i = 0, NG = N * H * G; i < NG; ++i) d_gate_[i] *= gate_mult_;
  }
  // Gradients of q, k, v land in d_qkv_ (stride W3) directly, unless QK stages sit in between.
  const std::size_t last = qk_stages_.size();
  const bool staged = last > 0;
  T* dq = staged ? d_q_ : d_qkv_;
  T* dk = staged ? d_k_ : d_qkv_ + Cq;
  const QkView qk = qk_view(l);
  // With HybridNorm's value norm the attention reads the normalised values (contiguous) and
  // writes their gradient to d_v_; the norm's backward then lands it in d_qkv_.
  const bool vnorm = plan_.blocks[l].attn.norm_qkv;
  const bool head = plan_.qk_per_head;
  const ops::AttnRows<const T> v{vnorm ? a.vn.out : a.qkv + Cq + Ckv, vnorm ? Ckv : W3};
  ops::AttnGrads<T> grads{.dq = {dq, staged ? Cq : W3},
                          .dk = {dk, staged ? Ckv : W3},
                          .dv = {vnorm ? d_v_ : d_qkv_ + Cq + Ckv, vnorm ? Ckv : W3}};
  for (const auto& c : attn_parts_) c->grads(l, grads);
  ops::attention_backward_tiled(grads, {d_o, Cq}, {{qk.q, qk.ldq}, {qk.k, qk.ldk}, v}, a.lse,
                                {B_, T_, H, Hkv, D}, attn_scores(l));
  if (vnorm) {
    norm_backward(a.vn, s.v_norm, a.v_raw, d_v_, d_v_raw_, head ? N * Hkv : N, head ? D : Ckv,
                  ops::Accum::overwrite);
    scatter_cols(d_qkv_, d_v_raw_, N, Ckv, W3, Cq + Ckv);
  }
  if (!attn_parts_.empty()) {  // the components' parameters: their gradients from the kernel's
    const std::function<T*(long)> grad = [this](long off) { return g(off); };
    for (const auto& c : attn_parts_) c->finish_backward(l, B_, grad);
  }
  if (staged) {
    // Replay the QK stages backwards for queries (H heads), then keys (Hkv heads).
    const T sqk_mult = static_cast<T>(plan_.ngpt.s_qk.mult());
    auto qk_back = [&](T* dcur, T** stages, const NormCache& nc, const NormSlots& ns, int heads) {
      const long rows = head ? N * heads : N;
      const int width = head ? D : heads * D;
      const int W = heads * D;
      T* scratch[2] = {d_qk_stage_a_, d_qk_stage_b_};
      for (std::size_t st = last; st-- > 0;) {
        T* dprev = scratch[st % 2];
        switch (qk_stages_[st]) {
          case QkStage::norm:
            norm_backward(nc, ns, stages[st], dcur, dprev, rows, width, ops::Accum::overwrite);
            break;
          case QkStage::rope:
            ops::rope_backward(dprev, dcur, rope_cos(l), rope_sin(l), B_, T_, heads, D,
                               ops::Accum::overwrite);
            break;
          case QkStage::scale:
            ops::channel_scale_backward(dprev, W, g(s.s_qk), dcur, W, stages[st], W, p(s.s_qk),
                                        sqk_mult, N, W);
            break;
        }
        dcur = dprev;
      }
      return dcur;
    };
    const T* dq0 = qk_back(d_q_, a.qs, a.qn, s.q_norm, H);
    scatter_cols(d_qkv_, dq0, N, Cq, W3, 0);
    const T* dk0 = qk_back(d_k_, a.ks, a.kn, s.k_norm, Hkv);
    scatter_cols(d_qkv_, dk0, N, Ckv, W3, Cq);
  }
  const WeightGrad dwqkv = weight_grad(s.wqkv);
  ops::linear_backward(du, dwqkv.dw, g(s.bqkv), d_qkv_, u, weight(s.wqkv), static_cast<int>(N), C,
                       W3, du_accum, mm_, dwqkv.accum);
  finish_weight_grad(s.wqkv);
  if (G > 0) {  // the gate projection reads u too: its share adds into du
    const WeightGrad dwg = weight_grad(s.wg);
    ops::linear_backward(du, dwg.dw, static_cast<T*>(nullptr), d_gate_, u, weight(s.wg),
                         static_cast<int>(N), C, H * G, ops::Accum::add, mm_, dwg.accum);
    finish_weight_grad(s.wg);
  }
}

// ---------------------------------------------------------------------------------------------
// MLP branch

template <class T>
void Transformer<T>::mlp_forward(int l, const T* u, T* f) {
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model, F = cfg_.d_ff;
  const MlpSlots& s = blocks_[l].mlp;
  MlpActs& a = mlp_acts_[l];
  const bool gl = gated(cfg_.mlp);
  const int F_in = gl ? 2 * F : F;
  ops::linear_forward(a.h, u, weight(s.w_in), p(s.b_in), static_cast<int>(N), C, F_in, mm_);
  const T* h = a.h;
  if (plan_.ngpt.on) {
    // nGPT (eqs. 18-20): v = s_v sqrt(C) (W_v u) on the gate half, u = s_u (W_u u) on the up half.
    const NgptScales& ng = plan_.ngpt;
    ops::channel_scale_forward(a.hs, F_in, a.h, F_in, p(s.s_v),
                               static_cast<T>(ng.s_v.mult() * ng.v_gain), N, F);
    ops::channel_scale_forward(a.hs + F, F_in, a.h + F, F_in, p(s.s_u),
                               static_cast<T>(ng.s_u.mult()), N, F);
    h = a.hs;
  }
  if (gl)
    ops::glu_forward(activation_of(cfg_.mlp), a.a, h, static_cast<int>(N), F);
  else
    ops::activation_forward(activation_of(cfg_.mlp), a.a, a.h, N * F);
  ops::linear_forward(f, a.a, weight(s.w_out), p(s.b_out), static_cast<int>(N), F, C, mm_);
}

template <class T>
void Transformer<T>::mlp_backward(int l, const T* u, const T* df, T* du, ops::Accum du_accum) {
  const long N = static_cast<long>(B_) * T_;
  const int C = cfg_.d_model, F = cfg_.d_ff;
  const MlpSlots& s = blocks_[l].mlp;
  MlpActs& a = mlp_acts_[l];
  const bool gl = gated(cfg_.mlp);
  const int F_in = gl ? 2 * F : F;
  const WeightGrad dwout = weight_grad(s.w_out);
  ops::linear_backward(d_mlp_act_, dwout.dw, g(s.b_out), df, a.a, weight(s.w_out),
                       static_cast<int>(N), F, C, ops::Accum::overwrite, mm_, dwout.accum);
  finish_weight_grad(s.w_out);
  const T* h = plan_.ngpt.on ? a.hs : a.h;
  if (gl)
    ops::glu_backward(activation_of(cfg_.mlp), d_mlp_h_, d_mlp_act_, h, static_cast<int>(N), F,
                      ops::Accum::overwrite);
  else
    ops::activation_backward(activation_of(cfg_.mlp), d_mlp_h_, d_mlp_act_, h, N * F,
                             ops::Accum::overwrite);
  if (plan_.ngpt.on) {  // back through s_v sqrt(C) and s_u, in place
    const NgptScales& ng = plan_.ngpt;
    ops::channel_scale_backward(d_mlp_h_, F_in, g(s.s_v), d_mlp_h_, F_in, a.h, F_in, p(s.s_v),
                                static_cast<T>(ng.s_v.mult() * ng.v_gain), N, F);
    ops::channel_scale_backward(d_mlp_h_ + F, F_in, g(s.s_u), d_mlp_h_ + F, F_in, a.h + F, F_in,
                                p(s.s_u), static_cast<T>(ng.s_u.mult()), N, F);
  }
  const WeightGrad dwin = weight_grad(s.w_in);
  ops::linear_backward(du, dwin.dw, g(s.b_in), d_mlp_h_, u, weight(s.w_in), static_cast<int>(N), C,
                       F_in, du_accum, mm_, dwin.accum);
  finish_weight_grad(s.w_in);
}

// ---------------------------------------------------------------------------------------------
// Whole model

#define NL_BRANCHES(T)                                                                       \
  template void Transformer<T>::attn_forward(int, const T*, T*);                             \
  template typename Transformer<T>::QkView Transformer<T>::qk_view(int) const;               \
  template ops::AttnScores<T> Transformer<T>::attn_scores(int) const;                         \
  template int Transformer<T>::gate_width() const;                                            \
  template void Transformer<T>::attn_backward(int, const T*, const T*, T*, ops::Accum);      \
  template void Transformer<T>::mlp_forward(int, const T*, T*);                              \
  template void Transformer<T>::mlp_backward(int, const T*, const T*, T*, ops::Accum);
NL_BRANCHES(float)
NL_BRANCHES(double)
#undef NL_BRANCHES

}  // namespace normlab
