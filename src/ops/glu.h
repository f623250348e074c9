// Gated linear unit: y = act(gate) * up, with h = [gate | up] as produced by one fused linear
// layer. SwiGLU (act = silu, Shazeer 2020) and GeGLU (act = gelu_tanh, Gemma). Shapes: h, dh (N,
// 2F) with gate in columns [0, F) and up in [F, 2F); y, dy (N, F).
#pragma once
#include "ops/accum.h"
#include "ops/activation.h"
#include "tensor/threading.h"

namespace normlab::ops {

template <Activation A, class T>
NORMLAB_WIDE_MAP void glu_forward_row(T* y, const T* g, int F) {
  const T* u = g + F;
#pragma omp simd
  for (int j = 0; j < F; ++j) y[j] = act_value_k<A>(g[j]) * u[j];
}

// y = act(h[:, :F]) * h[:, F:]   (overwrites y)
template <class T>
void glu_forward(Activation a, T* y, const T* h, int N, int F) {
  with_activation(a, [&]<Activation A>() {
    parallel_for(N, 16384 / F + 1, [&](long r0, long r1) {
      for (long r = r0; r < r1; ++r) glu_forward_row<A>(y + r * F, h + r * 2 * F, F);
    });
  });
}

template <Activation A, class T>
NORMLAB_WIDE_MAP void glu_backward_row(T* dg, const T* dy, const T* g, int F, Accum accum) {
  const T* u = g + F;
  T* du = dg + F;
  if (accum == Accum::add) {
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      T a, da;
      act_value_grad_k<A>(g[j], a, da);
      dg[j] += dy[j] * u[j] * da;
      du[j] += dy[j] * a;
    }
  } else {
#pragma omp simd
    for (int j = 0; j < F; ++j) {
      T a, da;
      act_value_grad_k<A>(g[j], a, da);
      dg[j] = dy[j] * u[j] * da;
      du[j] = dy[j] * a;
    }
  }
}

// dgate (+)= dy * up * act'(gate);  dup (+)= dy * act(gate)
// (into dh = [dgate | dup]: Accum::add adds, ::overwrite replaces; ops/accum.h)
template <class T>
void glu_backward(Activation a, T* dh, const T* dy, const T* h, int N, int F, Accum accum) {
  with_activation(a, [&]<Activation A>() {
    parallel_for(N, 16384 / F + 1, [&](long r0, long r1) {
      for (long r = r0; r < r1; ++r)
        glu_backward_row<A>(dh + r * 2 * F, dy + r * F, h + r * 2 * F, F, accum);
    });
  });
}

}  // namespace normlab::ops
