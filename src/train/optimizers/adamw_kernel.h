// AdamW (Loshchilov & Hutter 2019) with PyTorch's semantics, and global-norm gradient clipping.
// Shapes: p, g, m, v (n), one contiguous parameter range.
#pragma once
#include <cmath>

#include "tensor/chunked_sum.h"

namespace normlab {

// p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)        (t = step count, from 1)
// With grad_scale != 1 the gradient is scaled first, g = grad_scale * g, and written back (as
// in-place clipping leaves it), in the same pass over memory.
// The decayed weight and the step meet in one explicit fma (p * (1 - lr wd) - step, rounded once),
// so that the result does not depend on whether the compiler vectorises the loop or contracts it.
template <class T>
void adamw_update(T* p, T* g, T* m, T* v, long n, double lr, double beta1, double beta2, double eps,
                  double wd, long t, double grad_scale = 1.0) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  const T decay = static_cast<T>(1.0 - lr * wd);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T step = static_cast<T>(lr / bc1);
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
  const T e = static_cast<T>(eps);
  const T k = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0;
  parallel_for(n, 32768, [&](long b, long end) {
    T* ps = p + b;
    T* gs = g + b;
    T* ms = m + b;
    T* vs = v + b;
    if (scaled) {
#pragma omp simd
      for (long i = 0; i < end - b; ++i) {
        const T gi = gs[i] * k;
        gs[i] = gi;
        const T mi = b1 * ms[i] + (T(1) - b1) * gi;
        const T vi = b2 * vs[i] + (T(1) - b2) * gi * gi;
        ms[i] = mi;
        vs[i] = vi;
        ps[i] = std::fma(ps[i], decay, -(step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + e)));
      }
    } else {
#pragma omp simd
      for (long i = 0; i < end - b; ++i) {
        const T gi = gs[i];
        const T mi = b1 * ms[i] + (T(1) - b1) * gi;
        const T vi = b2 * vs[i] + (T(1) - b2) * gi * gi;
        ms[i] = mi;
        vs[i] = vi;
        ps[i] = std::fma(ps[i], decay, -(step * mi / (std::sqrt(vi) * inv_sqrt_bc2 + e)));
      }
    }
  });
}

// sum of squares, accumulated in double (per chunk, then the chunks in order)
template <class T>
double sum_squares(const T* g, long n) {
  return chunked_sum(n, 32768, [&](long b, long e) {
    const T* gs = g + b;
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (long i = 0; i < e - b; ++i) s += static_cast<double>(gs[i]) * gs[i];
    return s;
  });
}

}  // namespace normlab
