// Logit soft-capping (Gemma 2): y = cap * tanh(x / cap). Smooth and bounded in (-cap, cap).
// Shapes: x, y, dx, dy (n).
#pragma once
#include <cmath>

#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

// The loops of softcap_forward / softcap_backward over one thread's span of elements.
template <class T>
NORMLAB_WIDE_MAP void softcap_forward_span(T* y, const T* x, long n, T cap, T inv) {
#pragma omp simd
  for (long i = 0; i < n; ++i) y[i] = cap * tanh_fast(x[i] * inv);
}
template <class T>
NORMLAB_WIDE_MAP void softcap_backward_span(T* dx, const T* dy, const T* y, long n, T inv) {
#pragma omp simd
  for (long i = 0; i < n; ++i) {
    const T th = y[i] * inv;
    dx[i] = dy[i] * (T(1) - th * th);
  }
}

// y = cap * tanh(x / cap)   (overwrites y; y may alias x)
template <class T>
void softcap_forward(T* y, const T* x, long n, T cap) {
  const T inv = T(1) / cap;
  parallel_for(n, 16384,
               [&](long b, long e) { softcap_forward_span(y + b, x + b, e - b, cap, inv); });
}

// dy/dx = 1 - tanh^2(x / cap) = 1 - (y / cap)^2, written from the forward output y.
// dx = dy * (1 - (y/cap)^2)   (overwrites dx; dx may alias dy)
template <class T>
void softcap_backward(T* dx, const T* dy, const T* y, long n, T cap) {
  const T inv = T(1) / cap;
  parallel_for(n, 16384,
               [&](long b, long e) { softcap_backward_span(dx + b, dy + b, y + b, e - b, inv); });
}

}  // namespace normlab::ops
