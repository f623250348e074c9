// Logit soft-capping (Gemma 2): y = cap * tanh(x / cap). Smooth and bounded in (-cap, cap).
// Shapes: x, y, dx, dy (n).
#pragma once
#include <cmath>

#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

// y = cap * tanh(x / cap)   (overwrites y; y may alias x)
template <class T>
void softcap_forward(T* y, const T* x, long n, T cap) {
  const T inv = T(1) / cap;
  parallel_for(n, 16384, [&](long b, long e) {
    const T* xs = x + b;
    T* ys = y + b;
#pragma omp simd
    for (long i = 0; i < e - b; ++i) ys[i] = cap * tanh_fast(xs[i] * inv);
  });
}

// dy/dx = 1 - tanh^2(x / cap) = 1 - (y / cap)^2, written from the forward output y.
// dx = dy * (1 - (y/cap)^2)   (overwrites dx; dx may alias dy)
template <class T>
void softcap_backward(T* dx, const T* dy, const T* y, long n, T cap) {
  const T inv = T(1) / cap;
  parallel_for(n, 16384, [&](long b, long e) {
    const T* ys = y + b;
    const T* dys = dy + b;
    T* dxs = dx + b;
#pragma omp simd
    for (long i = 0; i < e - b; ++i) {
      const T th = ys[i] * inv;
      dxs[i] = dys[i] * (T(1) - th * th);
    }
  });
}

}  // namespace normlab::ops
