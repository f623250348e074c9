// LayerNorm over the last dimension, forward and backward.
// Shapes: x, out, dx, dout (N, C); w, b, dw, db (C); mean, rstd (N).
#pragma once
#include <cmath>

#include "ops/accum.h"
#include "tensor/threading.h"

namespace normlab::ops {

// out = (x - mean) * rstd * (g0 + w) + b, rstd = 1 / sqrt(var + eps), var biased.
// b may be null. Saves mean and rstd for the backward.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* x, const T* w, const T* b, int N, int C,
                       T eps, T g0) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * C;
      T m = 0;
      for (int c = 0; c < C; ++c) m += xr[c];
      m /= C;
      T v = 0;
      for (int c = 0; c < C; ++c) {
        const T d = xr[c] - m;
        v += d * d;
      }
      v /= C;
      const T s = T(1) / std::sqrt(v + eps);
      T* o = out + r * C;
      if (b)
        for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * (g0 + w[c]) + b[c];
      else
        for (int c = 0; c < C; ++c) o[c] = (xr[c] - m) * s * (g0 + w[c]);
      mean[r] = m;
      rstd[r] = s;
    }
  });
}

// xhat = (x - mean) * rstd, dxhat = dout * (g0 + w)
// dx (+)= rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))   (Accum::add adds, ::overwrite
//                                                                     replaces; ops/accum.h)
// dw += sum_rows dout * xhat, db += sum_rows dout                     (accumulate; db may be null)
template <class T>
void layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* x, const T* mean,
                        const T* rstd, const T* w, int N, int C, T g0, Accum accum) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const long off = r * C;
      const T* xr = x + off;
      const T* dr = dout + off;
      const T m = mean[r], s = rstd[r];
      T sum_d = 0, sum_dx = 0;
      for (int c = 0; c < C; ++c) {
        const T dxh = dr[c] * (g0 + w[c]);
        sum_d += dxh;
        sum_dx += dxh * (xr[c] - m) * s;
      }
      sum_d /= C;
      sum_dx /= C;
      T* dxr = dx + off;
      if (accum == Accum::add) {
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const T xh = (xr[c] - m) * s;
          dxr[c] += s * (dr[c] * (g0 + w[c]) - sum_d - xh * sum_dx);
        }
      } else {
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const T xh = (xr[c] - m) * s;
          dxr[c] = s * (dr[c] * (g0 + w[c]) - sum_d - xh * sum_dx);
        }
      }
    }
  });
  // Parameter gradients: reduce over rows, parallel over column blocks (no races).
  parallel_column_blocks(N, C, 64, [&](int c0, int c1) {
    for (int r = 0; r < N; ++r) {
      const long off = static_cast<long>(r) * C;
      const T m = mean[r], s = rstd[r];
      for (int c = c0; c < c1; ++c) {
        dw[c] += dout[off + c] * (x[off + c] - m) * s;
        if (db) db[c] += dout[off + c];
      }
    }
  });
}

}  // namespace normlab::ops
