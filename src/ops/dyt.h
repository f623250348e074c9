// DyT and Derf, the pointwise replacements of a norm, forward and backward:
//   DyT  (Zhu, Chen, He, LeCun, Liu 2025, "Transformers without Normalization"):
//        out = gamma * tanh(alpha x) + beta
//   Derf (Chen, Lu, Zhu, Sun, Liu 2025, "Stronger Normalization-Free Transformers"):
//        out = gamma * erf(alpha x + s) + beta
// alpha (and Derf's shift s) are learnable scalars of the site; gamma = g0 + w and beta = b are
// per channel (b may be null: no bias). Nothing is computed across a row, so the forward keeps no
// statistics and the backward recomputes phi(alpha x + s) from x.
// Shapes: x, out, dx, dout (N, C); w, b, dw, db (C); alpha, shift, dalpha, dshift: one value.
#pragma once
#include <cmath>
#include <type_traits>

#include "ops/accum.h"
#include "ops/row_partials.h"
#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

// The squashing function phi: tanh (DyT) or erf (Derf).
enum class Squash { tanh, erf };

namespace detail {

// phi(z). float: vec_math.h's tanh_fast and erf_fast (they vectorise; within 3e-7 of std::tanh
// and std::erf); double: the library functions, so that gradient checks keep exact references.
template <Squash S, class T>
NORMLAB_INLINE T squash(T z) {
  if constexpr (std::is_same_v<T, float>)
    return S == Squash::tanh ? tanh_fast(z) : erf_fast(z);
  else
    return S == Squash::tanh ? std::tanh(z) : std::erf(z);
}

// phi'(z), given phi = phi(z): tanh' = 1 - tanh^2; erf' = 2 / sqrt(pi) exp(-z^2).
template <Squash S, class T>
NORMLAB_INLINE T squash_grad(T z, T phi) {
  if constexpr (S == Squash::tanh) {
    return T(1) - phi * phi;
  } else {
    constexpr T two_over_sqrt_pi = T(1.12837916709551257390);
    if constexpr (std::is_same_v<T, float>)
      return two_over_sqrt_pi * exp_fast(-z * z);
    else
      return two_over_sqrt_pi * std::exp(-z * z);
  }
}

// One row, plain pointer arguments (see ops/rmsnorm.h).
template <Squash S, class T>
void dyt_forward_row(T* o, const T* xr, const T* w, const T* b, int C, T a, T s, T g0) {
  if (b) {
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (g0 + w[c]) * squash<S>(a * xr[c] + s) + b[c];
  } else {
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (g0 + w[c]) * squash<S>(a * xr[c] + s);
  }
}

// One row: dx (+)= a dz (Accum::add: dx = base + a dz; base may be dx itself), pw += dout phi,
// pb += dout (pb may be null), *pa += sum dz x, *ps += sum dz, with dz = dout (g0 + w) phi'(z).
template <Squash S, class T>
void dyt_backward_row(T* dxr, const T* br, T* pw, T* pb, T* pa, T* ps, const T* dr, const T* xr,
                      const T* w, int C, T a, T s, T g0, Accum accum) {
  T sum_dzx = 0, sum_dz = 0;
  if (accum == Accum::add) {
#pragma omp simd reduction(+ : sum_dzx, sum_dz)
    for (int c = 0; c < C; ++c) {
      const T z = a * xr[c] + s;
      const T phi = squash<S>(z);
      const T dz = dr[c] * (g0 + w[c]) * squash_grad<S>(z, phi);
      dxr[c] = br[c] + a * dz;
      pw[c] += dr[c] * phi;
      sum_dzx += dz * xr[c];
      sum_dz += dz;
    }
  } else {
#pragma omp simd reduction(+ : sum_dzx, sum_dz)
    for (int c = 0; c < C; ++c) {
      const T z = a * xr[c] + s;
      const T phi = squash<S>(z);
      const T dz = dr[c] * (g0 + w[c]) * squash_grad<S>(z, phi);
      dxr[c] = a * dz;
      pw[c] += dr[c] * phi;
      sum_dzx += dz * xr[c];
      sum_dz += dz;
    }
  }
  if (pb) {
#pragma omp simd
    for (int c = 0; c < C; ++c) pb[c] += dr[c];
  }
  *pa += sum_dzx;
  *ps += sum_dz;
}

}  // namespace detail

// out = (g0 + w) phi(alpha x + shift) + b  (overwrites out; b may be null). DyT: phi = tanh,
// shift = 0.
template <class T>
void dyt_forward(Squash f, T* out, const T* x, T alpha, T shift, const T* w, const T* b, int N,
                 int C, T g0) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      if (f == Squash::tanh)
        detail::dyt_forward_row<Squash::tanh>(out + r * C, x + r * C, w, b, C, alpha, shift, g0);
      else
        detail::dyt_forward_row<Squash::erf>(out + r * C, x + r * C, w, b, C, alpha, shift, g0);
    }
  });
}

// z = alpha x + shift, dz = dout * (g0 + w) * phi'(z)
// dx (+)= alpha dz                  (Accum::add adds, ::overwrite replaces; ops/accum.h)
// dw += sum_rows dout * phi(z)      db += sum_rows dout                        (accumulate)
// dalpha += sum dz * x              dshift += sum dz                           (accumulate)
// db and dshift may be null (no bias; DyT has no shift). With base (Accum::add only),
// dx = base + alpha dz, as in rmsnorm_backward.
template <class T>
void dyt_backward(Squash f, T* dx, T* dw, T* db, T* dalpha, T* dshift, const T* dout, const T* x,
                  T alpha, T shift, const T* w, int N, int C, T g0, Accum accum,
                  const T* base = nullptr) {
  if (!base) base = dx;
  // One pass over the rows; dw and the two scalars through per-chunk partials (C + 2 per chunk:
  // dw, then dalpha and dshift), db through its own (ops/row_partials.h).
  const int W = C + 2;
  const Chunks ch(N, 16384 / C + 1);
  T* pw_all = row_chunk_partials<T>(ch.count * W, 0);
  T* pb_all = db ? row_chunk_partials<T>(ch.count * C, 1) : nullptr;
  parallel_chunks_indexed(ch, [&](long k, long r0, long r1) {
    T* pw = pw_all + k * W;
    T* pb = db ? pb_all + k * C : nullptr;
    for (int c = 0; c < W; ++c) pw[c] = 0;
    if (pb)
      for (int c = 0; c < C; ++c) pb[c] = 0;
    for (long r = r0; r < r1; ++r) {
      if (f == Squash::tanh)
        detail::dyt_backward_row<Squash::tanh>(dx + r * C, base + r * C, pw, pb, pw + C,
                                               pw + C + 1, dout + r * C, x + r * C, w, C, alpha,
                                               shift, g0, accum);
      else
        detail::dyt_backward_row<Squash::erf>(dx + r * C, base + r * C, pw, pb, pw + C,
                                              pw + C + 1, dout + r * C, x + r * C, w, C, alpha,
                                              shift, g0, accum);
    }
  });
  sum_row_chunk_partials(pw_all, ch.count, W);
  for (int c = 0; c < C; ++c) dw[c] += pw_all[c];
  *dalpha += pw_all[C];
  if (dshift) *dshift += pw_all[C + 1];
  if (db) add_row_chunk_partials(db, pb_all, ch.count, C);
}

// A diagnostic, not part of the op: the fraction of x's n values whose z = alpha x + shift lies
// in phi's saturated range, where phi'(z) has fallen below a tenth of phi'(0):
//   tanh: 1 - tanh^2 z < 0.1  <=>  |z| > atanh(sqrt(0.9)) = 1.8184...
//   erf:  exp(-z^2) < 0.1     <=>  |z| > sqrt(ln 10)     = 1.5174...
// There the site passes back less than a tenth of the gradient it would pass in its linear part.
inline double dyt_saturation_bound(Squash f) {
  return f == Squash::tanh ? 1.8184464592320666 : 1.5174271293851465;
}
template <class T>
double dyt_saturated_fraction(Squash f, const T* x, long n, T alpha, T shift) {
  const T bound = static_cast<T>(dyt_saturation_bound(f));
  long count = 0;
#pragma omp simd reduction(+ : count)
  for (long i = 0; i < n; ++i) count += std::fabs(alpha * x[i] + shift) > bound;
  return n > 0 ? static_cast<double>(count) / static_cast<double>(n) : 0.0;
}

}  // namespace normlab::ops
