// LayerNorm over the last dimension, forward and backward.
// Shapes: x, out, dx, dout (N, C); w, b, dw, db (C); mean, rstd (N).
#pragma once
#include <cmath>

#include "ops/accum.h"
#include "ops/row_partials.h"
#include "tensor/threading.h"

namespace normlab::ops {

namespace detail {
// Row loops with plain pointer arguments (see ops/rmsnorm.h). Returns rstd; *mean gets the mean.
template <class T>
T layernorm_forward_row(T* o, T* mean, const T* xr, const T* w, const T* b, int C, T eps, T g0) {
  T m = 0;
#pragma omp simd reduction(+ : m)
  for (int c = 0; c < C; ++c) m += xr[c];
  m /= C;
  T v = 0;
#pragma omp simd reduction(+ : v)
  for (int c = 0; c < C; ++c) {
    const T d = xr[c] - m;
    v += d * d;
  }
  v /= C;
  const T s = T(1) / std::sqrt(v + eps);
  if (b) {
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * (g0 + w[c]) + b[c];
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * (g0 + w[c]);
  }
  *mean = m;
  return s;
}

// dx (+)= ..., pw += dout * xhat, pb += dout (pb may be null) for one row; Accum::add: dx = base
// + ... (base may be dx itself).
template <class T>
void layernorm_backward_row(T* dxr, const T* br, T* pw, T* pb, const T* dr, const T* xr, const T* w,
                            T m, T s, int C, T g0, Accum accum) {
  T sum_d = 0, sum_dx = 0;
#pragma omp simd reduction(+ : sum_d, sum_dx)
  for (int c = 0; c < C; ++c) {
    const T dxh = dr[c] * (g0 + w[c]);
    sum_d += dxh;
    sum_dx += dxh * (xr[c] - m) * s;
  }
  sum_d /= C;
  sum_dx /= C;
  if (accum == Accum::add) {
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const T xh = (xr[c] - m) * s;
      dxr[c] = br[c] + s * (dr[c] * (g0 + w[c]) - sum_d - xh * sum_dx);
    }
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const T xh = (xr[c] - m) * s;
      dxr[c] = s * (dr[c] * (g0 + w[c]) - sum_d - xh * sum_dx);
    }
  }
#pragma omp simd
  for (int c = 0; c < C; ++c) pw[c] += dr[c] * (xr[c] - m) * s;
  if (pb) {
#pragma omp simd
    for (int c = 0; c < C; ++c) pb[c] += dr[c];
  }
}
}  // namespace detail

// out = (x - mean) * rstd * (g0 + w) + b, rstd = 1 / sqrt(var + eps), var biased.
// b may be null. Saves mean and rstd for the backward.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C,
                       T eps, T g0) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r)
      rstd[r] = detail::layernorm_forward_row(out + r * C, mean + r, x + r * C, w, b, C, eps, g0);
  });
}

// xhat = (x - mean) * rstd, dxhat = dout * (g0 + w)
// dx (+)= rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))   (Accum::add adds, ::overwrite
//                                                                     replaces; ops/accum.h)
// dw += sum_rows dout * xhat, db += sum_rows dout                     (accumulate; db may be null)
// With base (Accum::add only), dx = base + ..., as in rmsnorm_backward.
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* mean,
                        const T* rstd, const T* w, int N, int C, T g0, Accum accum,
                        const T* base = nullptr) {
  if (!base) base = dx;
  // One pass over the rows; dw and db through per-chunk partials (ops/row_partials.h).
  const Chunks ch(N, 16384 / C + 1);
  T* pw_all = row_chunk_partials<T>(ch.count * C, 0);
  T* pb_all = db ? row_chunk_partials<T>(ch.count * C, 1) : nullptr;
  parallel_chunks_indexed(ch, [&](long k, long r0, long r1) {
    T* pw = pw_all + k * C;
    T* pb = db ? pb_all + k * C : nullptr;
    for (int c = 0; c < C; ++c) pw[c] = 0;
    if (pb)
      for (int c = 0; c < C; ++c) pb[c] = 0;
    for (long r = r0; r < r1; ++r)
      detail::layernorm_backward_row(dx + r * C, base + r * C, pw, pb, dout + r * C, x + r * C, w,
                                     mean[r], rstd[r], C, g0, accum);
  });
  add_row_chunk_partials(dw, pw_all, ch.count, C);
  if (db) add_row_chunk_partials(db, pb_all, ch.count, C);
}

}  // namespace normlab::ops
