// The operations of nGPT (Loshchilov et al. 2024, "nGPT: Normalized Transformer with
// Representation Learning on the Hypersphere"), forward and backward side by side:
//   l2norm:        y = x / ||x|| per row (the projection onto the unit sphere, "Norm" in the paper)
//   lerp update:   s = x + a (.) (g - x), a = m * a_stored per channel (eqs. 10-11: the eigen
//                  learning rates alpha_A, alpha_M; the model normalises s afterwards)
//   channel scale: y[r, c] = m * s[c] * x[r, c] (s_qk, s_u, s_v, s_z: sec. 2.5's scaling factors)
//   unit-norm constraint on a weight matrix, rows or columns (sec. 2.6: re-normalised after
//                  every optimizer step)
// m is the paper's "s_init / s_scale" multiplier: a parameter is stored starting at s_scale and
// used as (s_init / s_scale) * stored, so that its effective value starts at s_init while the
// optimizer moves it at the rate s_scale sets (sec. 2.5).
// Shapes: x, y, g, dx, dy, dg (rows, width) unless a leading dimension is given; a, s (width).
#pragma once
#include <algorithm>
#include <cmath>

#include "ops/accum.h"
#include "ops/row_partials.h"
#include "tensor/threading.h"

namespace normlab::ops {

// The smallest norm divided by (as F.normalize's eps): a zero row stays zero.
inline constexpr double kL2Floor = 1e-12;

// y = x * rnorm, rnorm = 1 / max(||x||, kL2Floor) per row (kept for the backward).
template <class T>
void l2norm_forward(T* y, T* rnorm, const T* x, long rows, int width) {
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * width;
      T* yr = y + r * width;
      T ss = 0;
#pragma omp simd reduction(+ : ss)
      for (int c = 0; c < width; ++c) ss += xr[c] * xr[c];
      const T s = T(1) / std::max(std::sqrt(ss), static_cast<T>(kL2Floor));
      rnorm[r] = s;
#pragma omp simd
      for (int c = 0; c < width; ++c) yr[c] = xr[c] * s;
    }
  });
}

// y = x rnorm:  dx (+)= rnorm * (dy - y (y . dy))   (Accum::add adds, ::overwrite replaces; with
// base (add only), dx = base + ...). No parameters.
template <class T>
void l2norm_backward(T* dx, const T* dy, const T* x, const T* rnorm, long rows, int width,
                     Accum accum, const T* base = nullptr) {
  if (!base) base = dx;
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * width;
      const T* dyr = dy + r * width;
      const T* br = base + r * width;
      T* dxr = dx + r * width;
      const T s = rnorm[r];
      T dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int c = 0; c < width; ++c) dot += xr[c] * dyr[c];
      const T k = dot * s * s;  // y (y . dy) = x s^2 (x . dy) = x k
      if (accum == Accum::add) {
#pragma omp simd
        for (int c = 0; c < width; ++c) dxr[c] = br[c] + s * (dyr[c] - xr[c] * k);
      } else {
#pragma omp simd
        for (int c = 0; c < width; ++c) dxr[c] = s * (dyr[c] - xr[c] * k);
      }
    }
  });
}

// s[r, c] = x[r, c] + m a[c] (g[r, c] - x[r, c])  (overwrites y).
template <class T>
void lerp_forward(T* y, const T* x, const T* g, const T* a, T m, long rows, int width) {
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * width;
      const T* gr = g + r * width;
      T* yr = y + r * width;
#pragma omp simd
      for (int c = 0; c < width; ++c) yr[c] = xr[c] + m * a[c] * (gr[c] - xr[c]);
    }
  });
}

// dx = (1 - m a) (.) dy,  dg = m a (.) dy   (both overwrite)
// da[c] += m sum_r dy[r, c] (g[r, c] - x[r, c])   (accumulates, in fixed row chunks)
template <class T>
void lerp_backward(T* dx, T* dg, T* da, const T* dy, const T* x, const T* g, const T* a, T m,
                   long rows, int width) {
  const Chunks ch(rows, 16384 / width + 1);
  T* part = row_chunk_partials<T>(ch.count * width);
  parallel_chunks_indexed(ch, [&](long k, long r0, long r1) {
    T* pa = part + k * width;
    for (int c = 0; c < width; ++c) pa[c] = 0;
    for (long r = r0; r < r1; ++r) {
      const T* dyr = dy + r * width;
      const T* xr = x + r * width;
      const T* gr = g + r * width;
      T* dxr = dx + r * width;
      T* dgr = dg + r * width;
#pragma omp simd
      for (int c = 0; c < width; ++c) {
        const T w = m * a[c];
        dxr[c] = (T(1) - w) * dyr[c];
        dgr[c] = w * dyr[c];
        pa[c] += dyr[c] * (gr[c] - xr[c]);
      }
    }
  });
  sum_row_chunk_partials(part, ch.count, width);
  for (int c = 0; c < width; ++c) da[c] += m * part[c];
}

// y[r, c] = m s[c] x[r, c] over `width` columns of rows with leading dimensions ldy, ldx (y may
// be x).
template <class T>
void channel_scale_forward(T* y, long ldy, const T* x, long ldx, const T* s, T m, long rows,
                           int width) {
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* xr = x + r * ldx;
      T* yr = y + r * ldy;
#pragma omp simd
      for (int c = 0; c < width; ++c) yr[c] = m * s[c] * xr[c];
    }
  });
}

// dx = m s (.) dy   (overwrites; dx may be dy)
// ds[c] += m sum_r dy[r, c] x[r, c]   (accumulates, in fixed row chunks; x is the input)
template <class T>
void channel_scale_backward(T* dx, long lddx, T* ds, const T* dy, long lddy, const T* x, long ldx,
                            const T* s, T m, long rows, int width) {
  const Chunks ch(rows, 16384 / width + 1);
  T* part = row_chunk_partials<T>(ch.count * width);
  parallel_chunks_indexed(ch, [&](long k, long r0, long r1) {
    T* ps = part + k * width;
    for (int c = 0; c < width; ++c) ps[c] = 0;
    for (long r = r0; r < r1; ++r) {
      const T* dyr = dy + r * lddy;
      const T* xr = x + r * ldx;
      T* dxr = dx + r * lddx;
#pragma omp simd
      for (int c = 0; c < width; ++c) {
        ps[c] += dyr[c] * xr[c];
        dxr[c] = m * s[c] * dyr[c];
      }
    }
  });
  sum_row_chunk_partials(part, ch.count, width);
  for (int c = 0; c < width; ++c) ds[c] += m * part[c];
}

// The unit-norm constraint on a (rows, cols) matrix: every row (by_rows) or every column divided
// by its L2 norm (floored at kL2Floor). No gradient: it runs on parameters, after an optimizer step.
template <class T>
void normalize_rows(T* w, long rows, long cols) {
  parallel_for(rows, 16384 / cols + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      T* wr = w + r * cols;
      double ss = 0;
      for (long c = 0; c < cols; ++c) ss += static_cast<double>(wr[c]) * wr[c];
      const T s = static_cast<T>(1.0 / std::max(std::sqrt(ss), kL2Floor));
      for (long c = 0; c < cols; ++c) wr[c] *= s;
    }
  });
}
template <class T>
void normalize_cols(T* w, long rows, long cols) {
  parallel_for(cols, 64, [&](long c0, long c1) {
    for (long c = c0; c < c1; ++c) {
      double ss = 0;
      for (long r = 0; r < rows; ++r) ss += static_cast<double>(w[r * cols + c]) * w[r * cols + c];
      const T s = static_cast<T>(1.0 / std::max(std::sqrt(ss), kL2Floor));
      for (long r = 0; r < rows; ++r) w[r * cols + c] *= s;
    }
  });
}

}  // namespace normlab::ops
