// The residual add with a learnable scale on the branch (model.residual_scale: ReZero, SkipInit,
// LayerScale), over `rows` rows of `width` values:
//   y[r, c] = alpha x[r, c] + a[c] g[r, c]
// where a has aw = 1 value (a scalar: ReZero, SkipInit; a[c] = a[0]) or aw = width values (one
// per channel: LayerScale's diag(lambda)).
#pragma once
#include "ops/row_partials.h"
#include "tensor/threading.h"

namespace normlab::ops {

template <class T>
void residual_scale_forward(T* y, T alpha, const T* x, const T* g, const T* a, long rows,
                            int width, int aw) {
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * width;
      const T* gr = g + r * width;
      T* yr = y + r * width;
      if (aw == 1) {
        const T a0 = a[0];
#pragma omp simd
        for (int c = 0; c < width; ++c) yr[c] = alpha * xr[c] + a0 * gr[c];
      } else {
#pragma omp simd
        for (int c = 0; c < width; ++c) yr[c] = alpha * xr[c] + a[c] * gr[c];
      }
    }
  });
}

// dx = alpha dy (overwrites; skipped when dx is null: the caller routes the residual path itself),
// dg = a (.) dy (overwrites),
// da[c] += sum_r dy[r, c] g[r, c] (aw = width), or da[0] += sum_{r, c} dy[r, c] g[r, c] (aw = 1)
// (accumulates). The sums run in fixed row chunks (ops/row_partials.h), so they do not depend on
// the thread count.
template <class T>
void residual_scale_backward(T* dx, T* dg, T* da, const T* dy, const T* g, const T* a, T alpha,
                             long rows, int width, int aw) {
  const Chunks ch(rows, 16384 / width + 1);
  T* part = row_chunk_partials<T>(ch.count * aw);
  parallel_chunks_indexed(ch, [&](long k, long r0, long r1) {
    T* pa = part + k * aw;
    for (int c = 0; c < aw; ++c) pa[c] = 0;
    for (long r = r0; r < r1; ++r) {
      const T* dyr = dy + r * width;
      const T* gr = g + r * width;
      T* dgr = dg + r * width;
      if (dx) {
        T* dxr = dx + r * width;
#pragma omp simd
        for (int c = 0; c < width; ++c) dxr[c] = alpha * dyr[c];
      }
      if (aw == 1) {
        const T a0 = a[0];
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < width; ++c) {
          dgr[c] = a0 * dyr[c];
          s += dyr[c] * gr[c];
        }
        pa[0] += s;
      } else {
#pragma omp simd
        for (int c = 0; c < width; ++c) {
          dgr[c] = a[c] * dyr[c];
          pa[c] += dyr[c] * gr[c];
        }
      }
    }
  });
  add_row_chunk_partials(da, part, ch.count, aw);
}

}  // namespace normlab::ops
