// The tiled attention kernels' row loops (ops/attention.h): plain loops over one row of scores,
// as separate functions so that they vectorise (inside the task lambdas GCC gives up on some of
// them), the tile size and the key span of a query tile, and the per-thread scratch.
#pragma once
#include <algorithm>
#include <cmath>

#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

constexpr int kAttnTile = 64;  // queries per tile

namespace detail {
// First key of query i: 0 when causal (window 0), else max(0, i - window + 1).
inline int first_key(int i, int window) { return window > 0 ? std::max(0, i - window + 1) : 0; }

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
// The soft-cap rows' tanh: tanh_fast, or with Small (every s_j / cap of the row below kTanhSmall,
// tensor/vec_math.h) tanh_fast_small, which gives tanh_fast's values there without its
// exponential (scores far below the cap, the common case). Each row loop is written once, over
// Small, with plain arguments; below_tanh_small picks the instance from the row's largest |s_j|
// (max_abs_row skips NaN, which stays NaN either way).
template <bool Small, class T>
NORMLAB_INLINE T cap_tanh(T x) {
  if constexpr (Small)
    return tanh_fast_small(x);
  else
    return tanh_fast(x);
}
template <class T>
bool below_tanh_small(T max_abs, T inv) {
  return max_abs * inv < T(kTanhSmall);
}
template <bool Small, class T>
NORMLAB_WIDE_MAP void softcap_loop(T* s, int n, T cap, T inv) {
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] = cap * cap_tanh<Small>(s[j] * inv);
}
// s = cap tanh(s / cap); max_abs: the row's largest |s_j| (max_abs_row).
template <class T>
void softcap_row(T* s, int n, T cap, T max_abs) {
  const T inv = T(1) / cap;
  if (below_tanh_small(max_abs, inv))
    softcap_loop<true>(s, n, cap, inv);
  else
    softcap_loop<false>(s, n, cap, inv);
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
NORMLAB_WIDE_MAP void scale_row(T* s, int n, T k) {
#pragma omp simd
  for (int j = 0; j < n; ++j) s[j] *= k;
}
// Backward: p = exp(s - lse) from the raw scores (and, capped, g = (1 - th^2) scale).
template <class T>
NORMLAB_WIDE_MAP void probs_row(T* p, int n, T l) {
#pragma omp simd
  for (int j = 0; j < n; ++j) p[j] = exp_fast(p[j] - l);
}
template <bool Small, class T>
NORMLAB_WIDE_MAP void probs_capped_loop(T* p, T* g, int n, T l, T cap, T inv, T scale) {
#pragma omp simd
  for (int j = 0; j < n; ++j) {
    const T t = cap_tanh<Small>(p[j] * inv);
    g[j] = (T(1) - t * t) * scale;
    p[j] = exp_fast(cap * t - l);
  }
}
template <class T>
void probs_capped_row(T* p, T* g, int n, T l, T cap, T scale) {
  const T inv = T(1) / cap;
  if (below_tanh_small(max_abs_row(p, n, T(0)), inv))
    probs_capped_loop<true>(p, g, n, l, cap, inv, scale);
  else
    probs_capped_loop<false>(p, g, n, l, cap, inv, scale);
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
NORMLAB_WIDE_MAP void dscores_row(T* d, const T* p, const T* g, int n, T dot, T scale) {
  if (g) {
#pragma omp simd
    for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot) * g[j];
  } else {
#pragma omp simd
    for (int j = 0; j < n; ++j) d[j] = p[j] * (d[j] - dot) * scale;
  }
}

struct AttnScratch;  // thread_scratch's owner tag: the tiles' scores, probabilities, cap factors
template <class T>
T* attn_scratch(int slot, long n) {
  return thread_scratch<AttnScratch, 3, T>(slot, n);
}

// Keys a query tile [i0, i0 + tq) multiplies: [tile_lo, i0 + tq).
inline int tile_lo(int i0, int window) { return first_key(i0, window); }
// Columns of the (tq, nk) score tile a key span [lo, lo + nk) needs at most (scratch size).
inline long tile_cols(int Tn, int window) {
  return window > 0 ? std::min<long>(Tn, kAttnTile + window - 1) : Tn;
}
template <class T>
void zero_outside(T* s, int a, int n, int nk) {
  for (int j = 0; j < a; ++j) s[j] = T(0);
  for (int j = a + n; j < nk; ++j) s[j] = T(0);
}
}  // namespace detail

}  // namespace normlab::ops
