// RMSNorm over the last dimension (Zhang & Sennrich 2019), forward and backward.
// Shapes: x, out, dx, dout (N, C); w, dw (C); rstd (N).
#pragma once
#include <cmath>

#include "ops/accum.h"
#include "ops/row_partials.h"
#include "tensor/threading.h"

namespace normlab::ops {

namespace detail {
// The row loops take plain pointers: inside the parallel lambdas GCC reloads captured pointers per
// SIMD lane (gathers) in `omp simd` loops.
template <class T>
T rmsnorm_forward_row(T* o, const T* xr, const T* w, int C, T eps, T g0) {
  T ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
  const T s = T(1) / std::sqrt(ss / C + eps);
#pragma omp simd
  for (int c = 0; c < C; ++c) o[c] = xr[c] * s * (g0 + w[c]);
  return s;
}

// dx (+)= ..., pw += dout * xhat for one row (rstd s); Accum::add: dx = base + ... (base may be
// dx itself).
template <class T>
void rmsnorm_backward_row(T* dxr, const T* br, T* pw, const T* dr, const T* xr, const T* w, T s,
                          int C, T g0, Accum accum) {
  T sum_dx = 0;
#pragma omp simd reduction(+ : sum_dx)
  for (int c = 0; c < C; ++c) sum_dx += dr[c] * (g0 + w[c]) * xr[c] * s;
  sum_dx /= C;
  if (accum == Accum::add) {
#pragma omp simd
    for (int c = 0; c < C; ++c) dxr[c] = br[c] + s * (dr[c] * (g0 + w[c]) - xr[c] * s * sum_dx);
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) dxr[c] = s * (dr[c] * (g0 + w[c]) - xr[c] * s * sum_dx);
  }
#pragma omp simd
  for (int c = 0; c < C; ++c) pw[c] += dr[c] * xr[c] * s;
}
}  // namespace detail

// out = x * rstd * (g0 + w), rstd = 1 / sqrt(mean(x^2) + eps) (eps inside the root).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, T eps, T g0) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r)
      rstd[r] = detail::rmsnorm_forward_row(out + r * C, x + r * C, w, C, eps, g0);
  });
}

// xhat = x * rstd, dxhat = dout * (g0 + w)
// dx (+)= rstd * (dxhat - xhat * mean(dxhat * xhat))   (Accum::add adds, ::overwrite replaces;
//                                                       ops/accum.h)
// dw += sum_rows dout * xhat                            (accumulates)
// With base (Accum::add only), dx = base + ...: the sum with another gradient (the residual
// stream's) in the same pass, bitwise what a copy of base into dx and an add give.
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* rstd, const T* w, int N,
                      int C, T g0, Accum accum, const T* base = nullptr) {
  if (!base) base = dx;
  // One pass over the rows: dx row by row, and dw through per-chunk partials (ops/row_partials.h)
  // summed while the row is in cache.
  const Chunks ch(N, 16384 / C + 1);
  T* part = row_chunk_partials<T>(ch.count * C);
  parallel_chunks_indexed(ch, [&](long k, long r0, long r1) {
    T* pw = part + k * C;
    for (int c = 0; c < C; ++c) pw[c] = 0;
    for (long r = r0; r < r1; ++r)
      detail::rmsnorm_backward_row(dx + r * C, base + r * C, pw, dout + r * C, x + r * C, w,
                                   rstd[r], C, g0, accum);
  });
  add_row_chunk_partials(dw, part, ch.count, C);
}

}  // namespace normlab::ops
