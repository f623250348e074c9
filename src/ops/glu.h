// Gated linear unit: y = act(gate) * up, with h = [gate | up] as produced by one fused linear layer.
// SwiGLU (act = silu, Shazeer 2020) and GeGLU (act = gelu_tanh, Gemma).
// Shapes: h, dh (N, 2F) with gate in columns [0, F) and up in [F, 2F); y, dy (N, F).
#pragma once
#include "ops/activation.h"

namespace normlab::ops {

// y = act(h[:, :F]) * h[:, F:]   (overwrites y)
template <class T>
void glu_forward(Activation a, T* y, const T* h, int N, int F) {
  with_activation(a, [&]<Activation A>() {
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * F > 32768)
    for (int r = 0; r < N; ++r) {
      const T* g = h + static_cast<long>(r) * 2 * F;
      const T* u = g + F;
      T* yr = y + static_cast<long>(r) * F;
#pragma omp simd
      for (int j = 0; j < F; ++j) yr[j] = act_value_k<A>(g[j]) * u[j];
    }
  });
}

// dgate (+)= dy * up * act'(gate);  dup (+)= dy * act(gate)
// accumulate = true adds into dh, false overwrites it.
template <class T>
void glu_backward(Activation a, T* dh, const T* dy, const T* h, int N, int F,
                  bool accumulate = true) {
  with_activation(a, [&]<Activation A>() {
#pragma omp parallel for schedule(static) if (static_cast<long>(N) * F > 32768)
    for (int r = 0; r < N; ++r) {
      const T* g = h + static_cast<long>(r) * 2 * F;
      const T* u = g + F;
      T* dg = dh + static_cast<long>(r) * 2 * F;
      T* du = dg + F;
      const T* dyr = dy + static_cast<long>(r) * F;
#pragma omp simd
      for (int j = 0; j < F; ++j) {
        const T dgj = dyr[j] * u[j] * act_grad_k<A>(g[j]);
        const T duj = dyr[j] * act_value_k<A>(g[j]);
        dg[j] = accumulate ? dg[j] + dgj : dgj;
        du[j] = accumulate ? du[j] + duj : duj;
      }
    }
  });
}

}  // namespace normlab::ops
