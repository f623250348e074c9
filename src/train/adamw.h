// AdamW (Loshchilov & Hutter 2019) with PyTorch's semantics, and global-norm gradient clipping.
// Shapes: p, g, m, v (n), one contiguous parameter range.
#pragma once
#include <cmath>

namespace normlab {

// p -= lr * wd * p;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
// p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)        (t = step count, from 1)
template <class T>
void adamw_update(T* p, const T* g, T* m, T* v, long n, double lr, double beta1, double beta2,
                  double eps, double wd, long t) {
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(t));
  const T decay = static_cast<T>(1.0 - lr * wd);
  const T b1 = static_cast<T>(beta1), b2 = static_cast<T>(beta2);
  const T step = static_cast<T>(lr / bc1);
  const T inv_sqrt_bc2 = static_cast<T>(1.0 / std::sqrt(bc2));
  const T e = static_cast<T>(eps);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (long i = 0; i < n; ++i) {
    const T gi = g[i];
    m[i] = b1 * m[i] + (T(1) - b1) * gi;
    v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
    p[i] = p[i] * decay - step * m[i] / (std::sqrt(v[i]) * inv_sqrt_bc2 + e);
  }
}

// sum of squares, accumulated in double
template <class T>
double sum_squares(const T* g, long n) {
  double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s) if (n > 65536)
  for (long i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
  return s;
}

template <class T>
void scale_in_place(T* g, long n, double k) {
  const T kk = static_cast<T>(k);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (long i = 0; i < n; ++i) g[i] *= kk;
}

}  // namespace normlab
