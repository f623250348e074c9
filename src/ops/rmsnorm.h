// RMSNorm over the last dimension (Zhang & Sennrich 2019), forward and backward.
// Shapes: x, out, dx, dout (N, C); w, dw (C); rstd (N).
#pragma once
#include <cmath>

#include "ops/accum.h"
#include "tensor/threading.h"

namespace normlab::ops {

// out = x * rstd * (g0 + w), rstd = 1 / sqrt(mean(x^2) + eps) (eps inside the root).
template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* x, const T* w, int N, int C, T eps, T g0) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T ss = 0;
      for (int c = 0; c < C; ++c) ss += xr[c] * xr[c];
      const T s = T(1) / std::sqrt(ss / C + eps);
      T* o = out + r * C;
      for (int c = 0; c < C; ++c) o[c] = xr[c] * s * (g0 + w[c]);
      rstd[r] = s;
    }
  });
}

// xhat = x * rstd, dxhat = dout * (g0 + w)
// dx (+)= rstd * (dxhat - xhat * mean(dxhat * xhat))   (Accum::add adds, ::overwrite replaces;
//                                                       ops/accum.h)
// dw += sum_rows dout * xhat                            (accumulates)
template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dout, const T* x, const T* rstd, const T* w, int N,
                      int C, T g0, Accum accum) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const long off = r * C;
      const T* xr = x + off;
      const T* dr = dout + off;
      const T s = rstd[r];
      T sum_dx = 0;
      for (int c = 0; c < C; ++c) sum_dx += dr[c] * (g0 + w[c]) * xr[c] * s;
      sum_dx /= C;
      T* dxr = dx + off;
      if (accum == Accum::add) {
#pragma omp simd
        for (int c = 0; c < C; ++c) dxr[c] += s * (dr[c] * (g0 + w[c]) - xr[c] * s * sum_dx);
      } else {
#pragma omp simd
        for (int c = 0; c < C; ++c) dxr[c] = s * (dr[c] * (g0 + w[c]) - xr[c] * s * sum_dx);
      }
    }
  });
  parallel_column_blocks(N, C, 64, [&](int c0, int c1) {
    for (int r = 0; r < N; ++r) {
      const long off = static_cast<long>(r) * C;
      const T s = rstd[r];
      for (int c = c0; c < c1; ++c) dw[c] += dout[off + c] * x[off + c] * s;
    }
  });
}

}  // namespace normlab::ops
