// Causal multi-head scaled dot-product attention with optional logit soft-capping inside.
//   s_ij = scale * q_i . k_j;  s_ij = cap * tanh(s_ij / cap) if cap > 0 (BEFORE the mask, so a
//   masked -inf is never capped into a finite value);  P_i = softmax_{j <= i}(s_ij);  o_i = sum_j
//   P_ij v_j
// Shapes: q, k, v, o and their gradients (B, T, H, D) = (B, T, C) rows with C = H * D;
//         P, th (B, H, T, T): softmax probabilities and, when capped, tanh(s_raw / cap)
//         (only the causal lower triangle is written and read).
// attention_forward / attention_backward are the plain reference (they keep P); the model runs the
// tiled kernels at the end of this file, checked against them.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tensor/gemm.h"
#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

// Optional per-(b, h) statistics gathered in the forward pass for diagnostics (may be null):
// max |s| before the cap, and the attention entropy summed over query positions.
template <class T>
void attention_forward(T* o, T* P, T* th, const T* q, const T* k, const T* v, int B, int Tn, int H,
                       int D, T scale, T cap, T* max_abs_logit = nullptr,
                       T* entropy_sum = nullptr) {
  const int C = H * D;
  const long TT = static_cast<long>(Tn) * Tn;
  const long n_bh = static_cast<long>(B) * H;
  parallel_for(n_bh, (static_cast<long>(B) * H * TT * D > 65536) ? 1 : n_bh, [&](long t0, long t1) {
    for (long task = t0; task < t1; ++task) {
      const int b = static_cast<int>(task / H), h = static_cast<int>(task % H);
      const long bh = static_cast<long>(b) * H + h;
      const T* qb = q + static_cast<long>(b) * Tn * C + h * D;
      const T* kb = k + static_cast<long>(b) * Tn * C + h * D;
      const T* vb = v + static_cast<long>(b) * Tn * C + h * D;
      T* ob = o + static_cast<long>(b) * Tn * C + h * D;
      T* Pb = P + bh * TT;
      T* thb = th ? th + bh * TT : nullptr;
      T max_abs = 0, ent = 0;
      for (int i = 0; i < Tn; ++i) {
        const T* qi = qb + static_cast<long>(i) * C;
        T* Pi = Pb + static_cast<long>(i) * Tn;
        T m = -std::numeric_limits<T>::infinity();
        for (int j = 0; j <= i; ++j) {
          const T* kj = kb + static_cast<long>(j) * C;
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
        T sum = 0;
        for (int j = 0; j <= i; ++j) {
          Pi[j] = std::exp(Pi[j] - m);
          sum += Pi[j];
        }
        const T inv = T(1) / sum;
        for (int j = 0; j <= i; ++j) Pi[j] *= inv;
        if (entropy_sum)
          for (int j = 0; j <= i; ++j)
            if (Pi[j] > 0) ent -= Pi[j] * std::log(Pi[j]);
        T* oi = ob + static_cast<long>(i) * C;
        for (int d = 0; d < D; ++d) oi[d] = 0;
        for (int j = 0; j <= i; ++j) {
          const T* vj = vb + static_cast<long>(j) * C;
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
// All input gradients accumulate. Parallel over (b, h): each writes its own slices.
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k, const T* v,
                        const T* P, const T* th, int B, int Tn, int H, int D, T scale, T cap) {
  const int C = H * D;
  const long TT = static_cast<long>(Tn) * Tn;
  const long n_bh = static_cast<long>(B) * H;
  parallel_for(n_bh, (static_cast<long>(B) * H * TT * D > 65536) ? 1 : n_bh, [&](long t0, long t1) {
    for (long task = t0; task < t1; ++task) {
      const int b = static_cast<int>(task / H), h = static_cast<int>(task % H);
      const long bh = static_cast<long>(b) * H + h;
      const long base = static_cast<long>(b) * Tn * C + h * D;
      const T* Pb = P + bh * TT;
      const T* thb = th ? th + bh * TT : nullptr;
      // Row buffer for dP / dS of one query; T is at most a few thousand.
      T dS_stack[1024];
      T* dS = Tn <= 1024 ? dS_stack : new T[Tn];
      for (int i = 0; i < Tn; ++i) {
        const T* doi = dout + base + static_cast<long>(i) * C;
        const T* Pi = Pb + static_cast<long>(i) * Tn;
        T dot = 0;
        for (int j = 0; j <= i; ++j) {
          const T* vj = v + base + static_cast<long>(j) * C;
          T* dvj = dv + base + static_cast<long>(j) * C;
          T dp = 0;
          for (int d = 0; d < D; ++d) {
            dp += doi[d] * vj[d];
            dvj[d] += Pi[j] * doi[d];
          }
          dS[j] = dp;
          dot += Pi[j] * dp;
        }
        const T* qi = q + base + static_cast<long>(i) * C;
        T* dqi = dq + base + static_cast<long>(i) * C;
        for (int j = 0; j <= i; ++j) {
          T ds = Pi[j] * (dS[j] - dot);
          if (cap > 0) {
            const T t = thb[static_cast<long>(i) * Tn + j];
            ds *= T(1) - t * t;
          }
          ds *= scale;
          const T* kj = k + base + static_cast<long>(j) * C;
          T* dkj = dk + base + static_cast<long>(j) * C;
          for (int d = 0; d < D; ++d) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
          }
        }
      }
      if (dS != dS_stack) delete[] dS;
    }
  });
}

}  // namespace normlab::ops

namespace normlab::ops {

// Inference with a KV cache: Tq new queries at absolute positions pos0 .. pos0 + Tq - 1 attend to
// the cached keys/values 0 .. pos0 + i (causal). B = 1. No backward: generation never trains.
// Shapes: q, o (Tq, C); kc, vc (>= pos0 + Tq, C); scratch (H, pos0 + Tq).
template <class T>
void attention_forward_kv(T* o, T* scratch, const T* q, const T* kc, const T* vc, int Tq, int pos0,
                          int H, int D, T scale, T cap) {
  const int C = H * D, Tk = pos0 + Tq;
  parallel_for(H, (static_cast<long>(H) * Tq * Tk * D > 65536) ? 1 : H, [&](long h0, long h1) {
    for (int h = static_cast<int>(h0); h < h1; ++h) {
      T* s = scratch + static_cast<long>(h) * Tk;
      for (int i = 0; i < Tq; ++i) {
        const T* qi = q + static_cast<long>(i) * C + h * D;
        const int nk = pos0 + i + 1;
        T m = -std::numeric_limits<T>::infinity();
        for (int j = 0; j < nk; ++j) {
          const T* kj = kc + static_cast<long>(j) * C + h * D;
          T d = 0;
          for (int e = 0; e < D; ++e) d += qi[e] * kj[e];
          d *= scale;
          if (cap > 0) d = cap * std::tanh(d / cap);
          s[j] = d;
          m = d > m ? d : m;
        }
        T z = 0;
        for (int j = 0; j < nk; ++j) z += (s[j] = std::exp(s[j] - m));
        T* oi = o + static_cast<long>(i) * C + h * D;
        for (int e = 0; e < D; ++e) oi[e] = 0;
        for (int j = 0; j < nk; ++j) {
          const T p = s[j] / z;
          const T* vj = vc + static_cast<long>(j) * C + h * D;
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
// Each (b, h) is one task; its queries go in tiles of kAttnTile rows, and a tile with queries
// [i0, i0 + tq) multiplies only keys [0, i0 + tq): the masked upper triangle is skipped except
// inside the diagonal block. Only the row log-sum-exp (B, H, T) is kept for the backward, which
// recomputes the scores with one more product instead of storing P (B, H, T, T) (as
// FlashAttention does, Dao et al. 2022).
// Strides: q, k, v, o and their gradients are rows of stride ld* (e.g. 3C for views into the
// fused qkv buffer), head h at column offset h * D.
constexpr int kAttnTile = 64;

namespace detail {
// Row kernels of the tiled attention: plain loops over one row of scores, as separate functions
// so that they vectorise (inside the task lambdas GCC gives up on some of them).
template <class T>
void softcap_row(T* s, int n, T cap) {
  const T inv = T(1) / cap;
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] = cap * tanh_fast(s[j] * inv);
}
template <class T>
T max_row(const T* s, int n) {
  T m = s[0];
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}
template <class T>
T max_abs_row(const T* s, int n, T m) {
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) m = std::fabs(s[j]) > m ? std::fabs(s[j]) : m;
  return m;
}
// s_j = exp(s_j - m); returns sum_j s_j, and sum_j e_j s_j (old s_j) in *es when es is not null.
template <class T>
T exp_row(T* s, int n, T m, T* es) {
  T sum = 0, e_s = 0;
  if (es) {
#pragma omp simd reduction(+ : sum, e_s)
    for (int j = 0; j < n; ++j) {
      const T e = exp_fast(s[j] - m);
      e_s += e * s[j];
      s[j] = e;
      sum += e;
    }
    *es = e_s;
  } else {
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; ++j) {
      const T e = exp_fast(s[j] - m);
      s[j] = e;
      sum += e;
    }
  }
  return sum;
}
template <class T>
void scale_row(T* s, int n, T k) {
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] *= k;
}
// Backward: p = exp(s - lse) from the raw scores (and, capped, g = (1 - th^2) scale).
template <class T>
void probs_row(T* p, int n, T l) {
#pragma omp simd
  for (int j = 0; j < n; ++j) p[j] = exp_fast(p[j] - l);
}
template <class T>
void probs_capped_row(T* p, T* g, int n, T l, T cap, T scale) {
  const T inv = T(1) / cap;
#pragma omp simd
  for (int j = 0; j < n; ++j) {
    const T t = tanh_fast(p[j] * inv);
    g[j] = (T(1) - t * t) * scale;
    p[j] = exp_fast(cap * t - l);
  }
}
template <class T>
T dot_row(const T* a, const T* b, int n) {
  T d = 0;
#pragma omp simd reduction(+ : d)
  for (int j = 0; j < n; ++j) d += a[j] * b[j];
  return d;
}
// d = p (d - dot) g  (g: per element, or the constant `scale` when g is null)
template <class T>
void dscores_row(T* d, const T* p, const T* g, int n, T dot, T scale) {
  if (g) {
#pragma omp simd
    for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot) * g[j];
  } else {
#pragma omp simd
    for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot) * scale;
  }
}

template <class T>
T* attn_scratch(int slot, long n) {
  thread_local std::vector<T> buf[3];
  if (static_cast<long>(buf[slot].size()) < n) buf[slot].resize(n);
  return buf[slot].data();
}
}  // namespace detail

// o = softmax(causal(cap(scale q k^T))) v  (overwrites o);  lse (B, H, T) = log sum_j exp(s_ij)
// Optional per-(b, h) statistics as in attention_forward (may be null): max |s| before the cap
// and the attention entropy summed over queries (row entropy = lse - sum_j P_ij s_ij).
template <class T>
void attention_forward_tiled(T* o, int ldo, T* lse, const T* q, int ldq, const T* k, int ldk,
                             const T* v, int ldv, int B, int Tn, int H, int D, T scale, T cap,
                             T* max_abs_logit = nullptr, T* entropy_sum = nullptr) {
  const long n_bh = static_cast<long>(B) * H;
  parallel_for(n_bh, (static_cast<long>(B) * H * Tn * Tn * D > 65536) ? 1 : n_bh,
               [&](long t0, long t1) {
                 for (long task = t0; task < t1; ++task) {
                   const int b = static_cast<int>(task / H), h = static_cast<int>(task % H);
                   const long row0 = static_cast<long>(b) * Tn;
                   const T* qb = q + row0 * ldq + h * D;
                   const T* kb = k + row0 * ldk + h * D;
                   const T* vb = v + row0 * ldv + h * D;
                   T* ob = o + row0 * ldo + h * D;
                   T* lb = lse + (static_cast<long>(b) * H + h) * Tn;
                   T* S = detail::attn_scratch<T>(0, static_cast<long>(kAttnTile) * Tn);
                   T max_abs = 0, ent = 0;
                   for (int i0 = 0; i0 < Tn; i0 += kAttnTile) {
                     const int tq = std::min(kAttnTile, Tn - i0), nk = i0 + tq;
                     // S (tq, nk) = scale * q_tile k^T
                     gemm_serial<T>(false, true, tq, nk, D, scale, qb + static_cast<long>(i0) * ldq,
                                    ldq, kb, ldk, T(0), S, nk);
                     for (int r = 0; r < tq; ++r) {
                       T* s = S + static_cast<long>(r) * nk;
                       const int n = i0 + r + 1;  // keys 0 .. i0 + r
                       if (max_abs_logit) max_abs = detail::max_abs_row(s, n, max_abs);
                       if (cap > 0) detail::softcap_row(s, n, cap);
                       const T m = detail::max_row(s, n);
                       T es = 0;
                       const T sum = detail::exp_row(s, n, m, entropy_sum ? &es : nullptr);
                       const T inv = T(1) / sum;
                       detail::scale_row(s, n, inv);
                       for (int j = n; j < nk; ++j) s[j] = T(0);
                       const T l = m + std::log(sum);
                       lb[i0 + r] = l;
                       if (entropy_sum) ent += l - es * inv;
                     }
                     // o_tile = P v
                     gemm_serial<T>(false, false, tq, D, nk, T(1), S, nk, vb, ldv, T(0),
                                    ob + static_cast<long>(i0) * ldo, ldo);
                   }
                   if (max_abs_logit) max_abs_logit[static_cast<long>(b) * H + h] = max_abs;
                   if (entropy_sum) entropy_sum[static_cast<long>(b) * H + h] = ent;
                 }
               });
}

// With s the capped scores and P = exp(s - lse) recomputed tile by tile:
// dP = do v^T;  dv = P^T do;  dS = P (dP - rowsum(P dP)) (1 - th^2 if capped) scale;
// dq = dS k;  dk = dS^T q.   dq, dk, dv are overwritten.
template <class T>
void attention_backward_tiled(T* dq, int lddq, T* dk, int lddk, T* dv, int lddv, const T* dout,
                              int lddo, const T* q, int ldq, const T* k, int ldk, const T* v,
                              int ldv, const T* lse, int B, int Tn, int H, int D, T scale, T cap) {
  const long n_bh = static_cast<long>(B) * H;
  parallel_for(
      n_bh, (static_cast<long>(B) * H * Tn * Tn * D > 65536) ? 1 : n_bh, [&](long t0, long t1) {
        for (long task = t0; task < t1; ++task) {
          const int b = static_cast<int>(task / H), h = static_cast<int>(task % H);
          const long row0 = static_cast<long>(b) * Tn;
          const T* qb = q + row0 * ldq + h * D;
          const T* kb = k + row0 * ldk + h * D;
          const T* vb = v + row0 * ldv + h * D;
          const T* dob = dout + row0 * lddo + h * D;
          T* dqb = dq + row0 * lddq + h * D;
          T* dkb = dk + row0 * lddk + h * D;
          T* dvb = dv + row0 * lddv + h * D;
          const T* lb = lse + (static_cast<long>(b) * H + h) * Tn;
          T* P = detail::attn_scratch<T>(0, static_cast<long>(kAttnTile) * Tn);
          T* dS = detail::attn_scratch<T>(1, static_cast<long>(kAttnTile) * Tn);
          T* G = cap > 0 ? detail::attn_scratch<T>(2, static_cast<long>(kAttnTile) * Tn) : nullptr;
          // Last tile first: it spans every key, so it initialises dk and dv (beta = 0).
          const int last = (Tn - 1) / kAttnTile * kAttnTile;
          for (int i0 = last; i0 >= 0; i0 -= kAttnTile) {
            const int tq = std::min(kAttnTile, Tn - i0), nk = i0 + tq;
            const T beta = i0 == last ? T(0) : T(1);
            const T* qt = qb + static_cast<long>(i0) * ldq;
            const T* dot = dob + static_cast<long>(i0) * lddo;
            gemm_serial<T>(false, true, tq, nk, D, scale, qt, ldq, kb, ldk, T(0), P, nk);
            for (int r = 0; r < tq; ++r) {
              T* p = P + static_cast<long>(r) * nk;
              const int n = i0 + r + 1;
              const T l = lb[i0 + r];
              if (cap > 0)
                detail::probs_capped_row(p, G + static_cast<long>(r) * nk, n, l, cap, scale);
              else
                detail::probs_row(p, n, l);
              for (int j = n; j < nk; ++j) p[j] = T(0);
            }
            // dP (tq, nk) = do_tile v^T;  dv (+)= P^T do_tile
            gemm_serial<T>(false, true, tq, nk, D, T(1), dot, lddo, vb, ldv, T(0), dS, nk);
            gemm_serial<T>(true, false, nk, D, tq, T(1), P, nk, dot, lddo, beta, dvb, lddv);
            for (int r = 0; r < tq; ++r) {
              const T* p = P + static_cast<long>(r) * nk;
              T* d = dS + static_cast<long>(r) * nk;
              const int n = i0 + r + 1;
              const T dotp = detail::dot_row(p, d, n);
              detail::dscores_row(d, p, cap > 0 ? G + static_cast<long>(r) * nk : nullptr, n, dotp,
                                  scale);
              for (int j = n; j < nk; ++j) d[j] = T(0);
            }
            // dq_tile = dS k;  dk (+)= dS^T q_tile
            gemm_serial<T>(false, false, tq, D, nk, T(1), dS, nk, kb, ldk, T(0),
                           dqb + static_cast<long>(i0) * lddq, lddq);
            gemm_serial<T>(true, false, nk, D, tq, T(1), dS, nk, qt, ldq, beta, dkb, lddk);
          }
        }
      });
}

}  // namespace normlab::ops
