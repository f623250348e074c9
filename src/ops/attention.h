// Causal multi-head scaled dot-product attention with grouped key/value heads, an optional
// sliding window, optional logit soft-capping and an optional attention sink inside.
//   s_ij = scale * q_i . k_j;  s_ij = cap * tanh(s_ij / cap) if cap > 0 (BEFORE the mask, so a
//   masked -inf is never capped into a finite value);  P_i = softmax_{j in K(i)}(s_ij);
//   o_i = sum_{j in K(i)} P_ij v_j,   K(i) = {j : i - W < j <= i} (window W > 0), {j <= i} (W = 0)
// Attention sink (model.attn_sink; `sink` (H) per query head, null for none): a virtual key with
// logit z_h (never capped, never masked) and a zero value joins every row's softmax,
//   P_ij = exp(s_ij) / (exp(z_h) + sum_{j' in K(i)} exp(s_ij')),  p0_i = exp(z_h) / (same),
// so the row's probabilities over real keys sum to 1 - p0_i and o_i = sum_j P_ij v_j as before
// (gpt-oss; softmax+1 is z = 0). Backward: the sink has dP = 0, so dS_ij keeps its form with
// dot_i = sum_j P_ij dP_ij, and dz_h = sum_i p0_i (0 - dot_i) = -sum_i p0_i dot_i.
// Grouped-query attention (GQA): H query heads share Hkv key/value heads (H % Hkv == 0); query head
// h reads key/value head h / (H / Hkv). Hkv = H is multi-head attention, Hkv = 1 multi-query.
// Shapes: q, o, dq, dout (B, T, H, D) = (B, T, Cq) rows with Cq = H * D;
//         k, v, dk, dv (B, T, Hkv, D) = (B, T, Ckv) rows with Ckv = Hkv * D;
//         P, th (B, H, T, T): softmax probabilities and, when capped, tanh(s_raw / cap)
//         (only the entries j in K(i) are written and read).
// attention_forward / attention_backward are the plain reference (they keep P); the model runs the
// tiled kernels at the end of this file, checked against them.
// Every kernel takes its sizes as an AttnShape and what acts on the scores (scale, soft-cap,
// window, sink) as an AttnScores, so that an option of the attention is a field of one of these
// small structs, read by the kernels and set in the one place that knows the model
// (Transformer::attn_scores, model/branches.cpp), not a positional argument of every kernel and
// caller.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ops/attention_rows.h"
#include "tensor/gemm.h"
#include "tensor/threading.h"

namespace normlab::ops {

// B sequences of T positions; H query heads over Hkv key/value heads (H % Hkv == 0) of size D.
struct AttnShape {
  int B = 1, T = 0, H = 0, Hkv = 0, D = 0;
  int Cq() const { return H * D; }     // a query row's width
  int Ckv() const { return Hkv * D; }  // a key/value row's width
};

// What turns q_i . k_j into softmax logits, in order: the scale, the soft-cap (0: none), the mask
// (window W > 0: i - W < j <= i; 0: causal) and the sink's logits z (H) joining every row's
// softmax (null: none). A new option on the scores is one more field here.
template <class T>
struct AttnScores {
  T scale = 1;
  T cap = 0;
  int window = 0;
  const T* sink = nullptr;
};

// Rows of stride ld (e.g. 3C for views into the fused qkv buffer): query head h at column offset
// h * D, key/value head hk at hk * D.
template <class T>
struct AttnRows {
  T* data = nullptr;
  int ld = 0;
};

// The tiled kernels' inputs: q (B, T, H D), k and v (B, T, Hkv D), each with its stride.
template <class T>
struct AttnInputs {
  AttnRows<const T> q, k, v;
};

// The gradients the tiled backward writes: dq, dk, dv, and a sink's per-(b, h) dz (B, H), null
// when not wanted.
template <class T>
struct AttnGrads {
  AttnRows<T> dq, dk, dv;
  T* dsink_bh = nullptr;
};

// Optional per-(b, h) statistics (B, H) of the forward pass for diagnostics, each null when not
// wanted: max |s| of the scores before the cap (the sink's logit is not a score); the attention
// entropy summed over query positions (the sink one of a row's outcomes); first_mass: P_i0, the
// probability on key position 0, summed over query rows i = 1 .. T-1 (row 0 has only key 0 and,
// without a sink, puts all its mass there; rows whose window no longer reaches key 0 add 0);
// sink_mass: the sink's p0_i summed over all rows. The reference kernel fills the first two.
template <class T>
struct AttnStats {
  T* max_abs_logit = nullptr;
  T* entropy_sum = nullptr;
  T* first_mass = nullptr;
  T* sink_mass = nullptr;
};

// The kernels deduce T from their AttnScores and plain pointers only; the structs they take as
// Given<...> (not deduced) can then be written as braced lists at the call ({o, Cq}).
template <class X>
using Given = std::type_identity_t<X>;

// The reference forward: o (B, T, H D) overwritten, P and th (B, H, T, T) as above (th only when
// capped), stats.max_abs_logit and stats.entropy_sum (h: query head) when not null.
template <class T>
void attention_forward(T* o, T* P, T* th, const T* q, const T* k, const T* v, const AttnShape& sh,
                       const AttnScores<T>& sc, Given<AttnStats<T>> stats = {}) {
  const int B = sh.B, Tn = sh.T, H = sh.H, Hkv = sh.Hkv, D = sh.D, window = sc.window;
  const T scale = sc.scale, cap = sc.cap;
  const T* sink = sc.sink;
  T* max_abs_logit = stats.max_abs_logit;
  T* entropy_sum = stats.entropy_sum;
  const int Cq = H * D, Ckv = Hkv * D, G = H / Hkv;
  const long TT = static_cast<long>(Tn) * Tn;
  const long n_bh = static_cast<long>(B) * H;
  parallel_for(n_bh, (static_cast<long>(B) * H * TT * D > 65536) ? 1 : n_bh, [&](long t0, long t1) {
    for (long task = t0; task < t1; ++task) {
      const int b = static_cast<int>(task / H), h = static_cast<int>(task % H), hk = h / G;
      const long bh = static_cast<long>(b) * H + h;
      const T* qb = q + static_cast<long>(b) * Tn * Cq + h * D;
      const T* kb = k + static_cast<long>(b) * Tn * Ckv + hk * D;
      const T* vb = v + static_cast<long>(b) * Tn * Ckv + hk * D;
      T* ob = o + static_cast<long>(b) * Tn * Cq + h * D;
      T* Pb = P + bh * TT;
      T* thb = th ? th + bh * TT : nullptr;
      T max_abs = 0, ent = 0;
      for (int i = 0; i < Tn; ++i) {
        const T* qi = qb + static_cast<long>(i) * Cq;
        T* Pi = Pb + static_cast<long>(i) * Tn;
        const int j0 = detail::first_key(i, window);
        T m = sink ? sink[h] : -std::numeric_limits<T>::infinity();
        for (int j = j0; j <= i; ++j) {
          const T* kj = kb + static_cast<long>(j) * Ckv;
          T s = 0;
          for (int d = 0; d < D; ++d) s += qi[d] * kj[d];
          s *= scale;
          max_abs = std::fabs(s) > max_abs ? std::fabs(s) : max_abs;
          if (cap > 0) {
            const T t = std::tanh(s / cap);
            thb[static_cast<long>(i) * Tn + j] = t;
            s = cap * t;
          }
          Pi[j] = s;
          m = s > m ? s : m;
        }
        const T e0 = sink ? std::exp(sink[h] - m) : T(0);  // the sink's term
        T sum = e0;
        for (int j = j0; j <= i; ++j) {
          Pi[j] = std::exp(Pi[j] - m);
          sum += Pi[j];
        }
        const T inv = T(1) / sum;
        for (int j = j0; j <= i; ++j) Pi[j] *= inv;
        if (entropy_sum) {  // over the row's outcomes, the sink one of them
          for (int j = j0; j <= i; ++j)
            if (Pi[j] > 0) ent -= Pi[j] * std::log(Pi[j]);
          if (e0 * inv > 0) ent -= e0 * inv * std::log(e0 * inv);
        }
        T* oi = ob + static_cast<long>(i) * Cq;
        for (int d = 0; d < D; ++d) oi[d] = 0;
        for (int j = j0; j <= i; ++j) {
          const T* vj = vb + static_cast<long>(j) * Ckv;
          const T p = Pi[j];
          for (int d = 0; d < D; ++d) oi[d] += p * vj[d];
        }
      }
      if (max_abs_logit) max_abs_logit[bh] = max_abs;
      if (entropy_sum) entropy_sum[bh] = ent;
    }
  });
}

// dP_ij = do_i . v_j;                 dv_j += sum_i P_ij do_i
// dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij')          (softmax backward)
// if cap: dS_ij *= 1 - th_ij^2                          (tanh soft-cap backward)
// dq_i += scale * sum_j dS_ij k_j;    dk_j += scale * sum_i dS_ij q_i
// (sums over j in K(i); dk, dv of a key/value head sum over the query heads of its group.)
// With a sink: dsink_bh (B, H) = -sum_i p0_i dot_i, p0_i = 1 - sum_j P_ij (overwritten; may be
// null). All input gradients accumulate. Parallel over (b, key/value head): each task runs the
// query heads of its group one after another and writes its own slices, so shared dk/dv never
// race.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* P, const T* th, const AttnShape& sh, const AttnScores<T>& sc,
                        T* dsink_bh = nullptr) {
  const int B = sh.B, Tn = sh.T, H = sh.H, Hkv = sh.Hkv, D = sh.D, window = sc.window;
  const T scale = sc.scale, cap = sc.cap;
  const int Cq = H * D, Ckv = Hkv * D, G = H / Hkv;
  const long TT = static_cast<long>(Tn) * Tn;
  const long n_tasks = static_cast<long>(B) * Hkv;
  parallel_for(n_tasks, (static_cast<long>(B) * H * TT * D > 65536) ? 1 : n_tasks,
               [&](long t0, long t1) {
    // Row buffer for dP / dS of one query; T is at most a few thousand.
    T dS_stack[1024];
    T* dS = Tn <= 1024 ? dS_stack : new T[Tn];
    for (long task = t0; task < t1; ++task) {
      const int b = static_cast<int>(task / Hkv), hk = static_cast<int>(task % Hkv);
      const long kbase = static_cast<long>(b) * Tn * Ckv + hk * D;
      for (int h = hk * G; h < (hk + 1) * G; ++h) {
        const long bh = static_cast<long>(b) * H + h;
        const long qbase = static_cast<long>(b) * Tn * Cq + h * D;
        const T* Pb = P + bh * TT;
        const T* thb = th ? th + bh * TT : nullptr;
        T dsink = 0;
        for (int i = 0; i < Tn; ++i) {
          const T* doi = dout + qbase + static_cast<long>(i) * Cq;
          const T* Pi = Pb + static_cast<long>(i) * Tn;
          const int j0 = detail::first_key(i, window);
          T dot = 0, p_real = 0;
          for (int j = j0; j <= i; ++j) {
            const T* vj = v + kbase + static_cast<long>(j) * Ckv;
            T* dvj = dv + kbase + static_cast<long>(j) * Ckv;
            T dp = 0;
            for (int d = 0; d < D; ++d) {
              dp += doi[d] * vj[d];
              dvj[d] += Pi[j] * doi[d];
            }
            dS[j] = dp;
            dot += Pi[j] * dp;
            p_real += Pi[j];
          }
          dsink -= (T(1) - p_real) * dot;
          const T* qi = q + qbase + static_cast<long>(i) * Cq;
          T* dqi = dq + qbase + static_cast<long>(i) * Cq;
          for (int j = j0; j <= i; ++j) {
            T ds = Pi[j] * (dS[j] - dot);
            if (cap > 0) {
              const T t = thb[static_cast<long>(i) * Tn + j];
              ds *= T(1) - t * t;
            }
            ds *= scale;
            const T* kj = k + kbase + static_cast<long>(j) * Ckv;
            T* dkj = dk + kbase + static_cast<long>(j) * Ckv;
            for (int d = 0; d < D; ++d) {
              dqi[d] += ds * kj[d];
              dkj[d] += ds * qi[d];
            }
          }
        }
        if (dsink_bh) dsink_bh[bh] = dsink;
      }
    }
    if (dS != dS_stack) delete[] dS;
  });
}

}  // namespace normlab::ops

namespace normlab::ops {

// Inference with a KV cache: Tq new queries at absolute positions p = pos0 .. pos0 + Tq - 1 attend
// to the cached keys/values j in K(p) (causal 0 .. p, or p - W < j <= p with a window W > 0).
// B = 1. No backward: generation never trains. Query head h reads key/value head h / (H / Hkv).
// Shapes: sh.B = 1, sh.T = Tq; q, o (Tq, H * D); kc, vc (>= pos0 + Tq, Hkv * D); scratch
// (H, pos0 + Tq); the scores as in attention_forward.
template <class T>
void attention_forward_kv(T* o, T* scratch, const T* q, const T* kc, const T* vc, int pos0,
                          const AttnShape& sh, const AttnScores<T>& sc) {
  const int Tq = sh.T, H = sh.H, Hkv = sh.Hkv, D = sh.D, window = sc.window;
  const T scale = sc.scale, cap = sc.cap;
  const T* sink = sc.sink;
  const int Cq = H * D, Ckv = Hkv * D, G = H / Hkv, Tk = pos0 + Tq;
  parallel_for(H, (static_cast<long>(H) * Tq * Tk * D > 65536) ? 1 : H, [&](long h0, long h1) {
    for (int h = static_cast<int>(h0); h < h1; ++h) {
      const int hk = h / G;
      T* s = scratch + static_cast<long>(h) * Tk;
      for (int i = 0; i < Tq; ++i) {
        const T* qi = q + static_cast<long>(i) * Cq + h * D;
        const int nk = pos0 + i + 1, j0 = detail::first_key(pos0 + i, window);
        T m = sink ? sink[h] : -std::numeric_limits<T>::infinity();
        for (int j = j0; j < nk; ++j) {
          const T* kj = kc + static_cast<long>(j) * Ckv + hk * D;
          T d = 0;
          for (int e = 0; e < D; ++e) d += qi[e] * kj[e];
          d *= scale;
          if (cap > 0) d = cap * std::tanh(d / cap);
          s[j] = d;
          m = d > m ? d : m;
        }
        T z = sink ? std::exp(sink[h] - m) : T(0);
        for (int j = j0; j < nk; ++j) z += (s[j] = std::exp(s[j] - m));
        T* oi = o + static_cast<long>(i) * Cq + h * D;
        for (int e = 0; e < D; ++e) oi[e] = 0;
        for (int j = j0; j < nk; ++j) {
          const T p = s[j] / z;
          const T* vj = vc + static_cast<long>(j) * Ckv + hk * D;
          for (int e = 0; e < D; ++e) oi[e] += p * vj[e];
        }
      }
    }
  });
}

}  // namespace normlab::ops

namespace normlab::ops {

// ---------------------------------------------------------------------------------------------
// Tiled causal attention with matrix products (the model's path).
// Queries go in tiles of kAttnTile rows, and a tile with queries [i0, i0 + tq) multiplies only
// keys [lo, i0 + tq), lo = 0 when causal and max(0, i0 - W + 1) with a window W: keys outside
// every row's K(i) are skipped except at the tile's edges, where the rows are masked. A window thus
// costs about W / T of the causal work and never forms (T, T). Only the row log-sum-exp (B, H, T)
// is kept for the backward, which recomputes the scores with one more product instead of storing
// P (B, H, T, T) (as FlashAttention does, Dao et al. 2022).
// q, k, v, o and their gradients are AttnRows: views into the fused qkv buffer and the like.
// The row loops, the tile size kAttnTile and the key span of a tile are ops/attention_rows.h.

// o = softmax(mask(cap(scale q k^T))) v  (overwrites o (B, T, H D), rows of stride o.ld);
// lse (B, H, T) = log sum_j exp(s_ij) (+ exp(z_h) with a sink); the statistics as AttnStats says.
// Parallel over (b, query head): each task writes only its own rows of o and lse.
template <class T>
void attention_forward_tiled(Given<AttnRows<T>> o, T* lse, Given<AttnInputs<T>> in,
                             const AttnShape& sh, const AttnScores<T>& sc,
                             Given<AttnStats<T>> stats = {}) {
  const int B = sh.B, Tn = sh.T, H = sh.H, Hkv = sh.Hkv, D = sh.D, window = sc.window;
  const T scale = sc.scale, cap = sc.cap;
  const T* sink = sc.sink;
  const T *q = in.q.data, *k = in.k.data, *v = in.v.data;
  const int ldq = in.q.ld, ldk = in.k.ld, ldv = in.v.ld, ldo = o.ld;
  T* max_abs_logit = stats.max_abs_logit;
  T* entropy_sum = stats.entropy_sum;
  T* first_mass = stats.first_mass;
  T* sink_mass = stats.sink_mass;
  const int G = H / Hkv;
  const long n_bh = static_cast<long>(B) * H;
  parallel_for(n_bh, (static_cast<long>(B) * H * Tn * Tn * D > 65536) ? 1 : n_bh,
               [&](long t0, long t1) {
                 for (long task = t0; task < t1; ++task) {
                   const int b = static_cast<int>(task / H), h = static_cast<int>(task % H);
                   const int hk = h / G;
                   const long row0 = static_cast<long>(b) * Tn;
                   const T* qb = q + row0 * ldq + h * D;
                   const T* kb = k + row0 * ldk + hk * D;
                   const T* vb = v + row0 * ldv + hk * D;
                   T* ob = o.data + row0 * ldo + h * D;
                   T* lb = lse + (static_cast<long>(b) * H + h) * Tn;
                   T* S = detail::attn_scratch<T>(0, kAttnTile * detail::tile_cols(Tn, window));
                   T max_abs = 0, ent = 0, first = 0, sunk = 0;
                   const T z = sink ? sink[h] : T(0);
                   for (int i0 = 0; i0 < Tn; i0 += kAttnTile) {
                     const int tq = std::min(kAttnTile, Tn - i0), lo = detail::tile_lo(i0, window);
                     const int nk = i0 + tq - lo;
                     // S (tq, nk) = scale * q_tile k[lo : i0 + tq)^T
                     gemm_serial<T>(false, true, tq, nk, D, scale, qb + static_cast<long>(i0) * ldq,
                                    ldq, kb + static_cast<long>(lo) * ldk, ldk, T(0), S, nk);
                     for (int r = 0; r < tq; ++r) {
                       T* srow = S + static_cast<long>(r) * nk;
                       // row i = i0 + r reads keys first_key(i) .. i: columns [a, a + n)
                       const int a = detail::first_key(i0 + r, window) - lo;
                       const int n = i0 + r + 1 - lo - a;
                       T* s = srow + a;
                       if (max_abs_logit || cap > 0) {
                         const T row_max = detail::max_abs_row(s, n, T(0));
                         max_abs = std::max(max_abs, row_max);
                         if (cap > 0) detail::softcap_row(s, n, cap, row_max);
                       }
                       // The online max includes the sink's logit, so exp never overflows.
                       const T m = sink ? std::max(detail::max_row(s, n), z)
                                        : detail::max_row(s, n);
                       T es = 0;
                       T sum = detail::exp_row(s, n, m, entropy_sum ? &es : nullptr);
                       const T e0 = sink ? std::exp(z - m) : T(0);
                       sum += e0;
                       const T inv = T(1) / sum;
                       detail::scale_row(s, n, inv);
                       detail::zero_outside(srow, a, n, nk);
                       const T l = m + std::log(sum);
                       lb[i0 + r] = l;
                       if (entropy_sum) ent += l - (es + e0 * z) * inv;
                       if (first_mass && lo == 0 && i0 + r > 0) first += srow[0];
                       sunk += e0 * inv;
                     }
                     // o_tile = P v[lo : i0 + tq)
                     gemm_serial<T>(false, false, tq, D, nk, T(1), S, nk,
                                    vb + static_cast<long>(lo) * ldv, ldv, T(0),
                                    ob + static_cast<long>(i0) * ldo, ldo);
                   }
                   const long bh = static_cast<long>(b) * H + h;
                   if (max_abs_logit) max_abs_logit[bh] = max_abs;
                   if (entropy_sum) entropy_sum[bh] = ent;
                   if (first_mass) first_mass[bh] = first;
                   if (sink_mass) sink_mass[bh] = sunk;
                 }
               });
}

// With s the capped scores and P = exp(s - lse) recomputed tile by tile:
// dP = do v^T;  dv = P^T do;  dS = P (dP - rowsum(P dP)) (1 - th^2 if capped) scale;
// dq = dS k;  dk = dS^T q.   dq, dk, dv are overwritten; dk, dv (B, T, Hkv * D) of a key/value
// head sum over the query heads of its group. With a sink (lse then includes it): dsink_bh
// (B, H) = -sum_i p0_i rowsum(P dP)_i, p0_i = exp(z_h - lse_i) (overwritten; null: not wanted).
// Parallel over (b, key/value head), the group's query heads in order inside the task, so the
// shared dk/dv rows never race and every task does the same work. Tiles run last to first; the
// first query head of a group writes (beta = 0) the key rows no earlier tile reached and
// accumulates into the rest.
template <class T>
void attention_backward_tiled(Given<AttnGrads<T>> grads, Given<AttnRows<const T>> dout,
                              Given<AttnInputs<T>> in, const T* lse, const AttnShape& sh,
                              const AttnScores<T>& sc) {
  const int B = sh.B, Tn = sh.T, H = sh.H, Hkv = sh.Hkv, D = sh.D, window = sc.window;
  const T scale = sc.scale, cap = sc.cap;
  const T* sink = sc.sink;
  const T *q = in.q.data, *k = in.k.data, *v = in.v.data;
  const int ldq = in.q.ld, ldk = in.k.ld, ldv = in.v.ld, lddo = dout.ld;
  T *dq = grads.dq.data, *dk = grads.dk.data, *dv = grads.dv.data, *dsink_bh = grads.dsink_bh;
  const int lddq = grads.dq.ld, lddk = grads.dk.ld, lddv = grads.dv.ld;
  const int G = H / Hkv;
  const long n_tasks = static_cast<long>(B) * Hkv;
  parallel_for(
      n_tasks, (static_cast<long>(B) * H * Tn * Tn * D > 65536) ? 1 : n_tasks,
      [&](long t0, long t1) {
        for (long task = t0; task < t1; ++task) {
          const int b = static_cast<int>(task / Hkv), hk = static_cast<int>(task % Hkv);
          const long row0 = static_cast<long>(b) * Tn;
          const T* kb = k + row0 * ldk + hk * D;
          const T* vb = v + row0 * ldv + hk * D;
          T* dkb = dk + row0 * lddk + hk * D;
          T* dvb = dv + row0 * lddv + hk * D;
          const long cols = detail::tile_cols(Tn, window);
          T* P = detail::attn_scratch<T>(0, kAttnTile * cols);
          T* dS = detail::attn_scratch<T>(1, kAttnTile * cols);
          T* Gc = cap > 0 ? detail::attn_scratch<T>(2, kAttnTile * cols) : nullptr;
          for (int h = hk * G; h < (hk + 1) * G; ++h) {
            const T* qb = q + row0 * ldq + h * D;
            const T* dob = dout.data + row0 * lddo + h * D;
            T* dqb = dq + row0 * lddq + h * D;
            const T* lb = lse + (static_cast<long>(b) * H + h) * Tn;
            T dsink = 0;
            // Key rows [written, Tn) of dk/dv hold sums already (all of them after the first head).
            int written = h == hk * G ? Tn : 0;
            // Y[lo : i0 + tq) (+)= A^T X for the (tq, nk) tile A: overwrite the rows below
            // `written`, accumulate the others.
            auto update = [&](const T* A, int nk, int lo, int tq, const T* X, int ldx, T* Y,
                              int ldy) {
              const int split = std::clamp(written, lo, lo + nk);
              if (split > lo)
                gemm_serial<T>(true, false, split - lo, D, tq, T(1), A, nk, X, ldx, T(0),
                               Y + static_cast<long>(lo) * ldy, ldy);
              if (lo + nk > split)
                gemm_serial<T>(true, false, lo + nk - split, D, tq, T(1), A + (split - lo), nk, X,
                               ldx, T(1), Y + static_cast<long>(split) * ldy, ldy);
            };
            const int last = (Tn - 1) / kAttnTile * kAttnTile;
            for (int i0 = last; i0 >= 0; i0 -= kAttnTile) {
              const int tq = std::min(kAttnTile, Tn - i0), lo = detail::tile_lo(i0, window);
              const int nk = i0 + tq - lo;
              const T* qt = qb + static_cast<long>(i0) * ldq;
              const T* dot = dob + static_cast<long>(i0) * lddo;
              const T* kt = kb + static_cast<long>(lo) * ldk;
              gemm_serial<T>(false, true, tq, nk, D, scale, qt, ldq, kt, ldk, T(0), P, nk);
              for (int r = 0; r < tq; ++r) {
                T* p = P + static_cast<long>(r) * nk;
                const int a = detail::first_key(i0 + r, window) - lo, n = i0 + r + 1 - lo - a;
                const T l = lb[i0 + r];
                if (cap > 0)
                  detail::probs_capped_row(p + a, Gc + static_cast<long>(r) * nk + a, n, l, cap,
                                           scale);
                else
                  detail::probs_row(p + a, n, l);
                detail::zero_outside(p, a, n, nk);
              }
              // dP (tq, nk) = do_tile v^T;  dv (+)= P^T do_tile
              gemm_serial<T>(false, true, tq, nk, D, T(1), dot, lddo,
                             vb + static_cast<long>(lo) * ldv, ldv, T(0), dS, nk);
              update(P, nk, lo, tq, dot, lddo, dvb, lddv);
              for (int r = 0; r < tq; ++r) {
                const T* p = P + static_cast<long>(r) * nk;
                T* d = dS + static_cast<long>(r) * nk;
                const int a = detail::first_key(i0 + r, window) - lo, n = i0 + r + 1 - lo - a;
                const T dotp = detail::dot_row(p + a, d + a, n);
                if (dsink_bh) dsink -= std::exp(sink[h] - lb[i0 + r]) * dotp;
                detail::dscores_row(d + a, p + a,
                                    cap > 0 ? Gc + static_cast<long>(r) * nk + a : nullptr, n,
                                    dotp, scale);
                detail::zero_outside(d, a, n, nk);
              }
              // dq_tile = dS k;  dk (+)= dS^T q_tile
              gemm_serial<T>(false, false, tq, D, nk, T(1), dS, nk, kt, ldk, T(0),
                             dqb + static_cast<long>(i0) * lddq, lddq);
              update(dS, nk, lo, tq, qt, ldq, dkb, lddk);
              written = std::min(written, lo);
            }
            if (dsink_bh) dsink_bh[static_cast<long>(b) * H + h] = dsink;
          }
        }
      });
}

}  // namespace normlab::ops
