// The sigmoid gate on the attention output (model.attn_gate; Qiu et al. 2025, "Gated Attention
// for Large Language Models", position G1: after the scaled dot-product attention, before the
// output projection; Qwen3-Next), over `rows` rows of H heads of D values:
//   gate[r, h, e] = sigmoid(z[r, h, e]),   y[r, h, d] = gate[r, h, e(d)] o[r, h, d]
// with G gate values per head: G = 1 (one per head: e(d) = 0) or G = D (elementwise: e(d) = d).
// z (rows, H G) are the gate logits u W_g^T, computed by the caller (a linear map of the branch
// input u); the forward turns them into the gates in place, which the backward reads.
#pragma once
#include <cmath>

#include "tensor/threading.h"

namespace normlab::ops {

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// gz (rows, H G): logits in, gates sigmoid(z) out (in place); y (rows, H D) = gate (.) o.
template <class T>
void attn_gate_forward(T* y, T* gz, const T* o, long rows, int H, int D, int G) {
  const int width = H * D, gw = H * G;
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      T* gr = gz + r * gw;
      for (int e = 0; e < gw; ++e) gr[e] = sigmoid(gr[e]);
      const T* orow = o + r * width;
      T* yr = y + r * width;
      for (int h = 0; h < H; ++h) {
        const T* gh = gr + h * G;
        if (G == 1) {
          const T gv = gh[0];
#pragma omp simd
          for (int d = 0; d < D; ++d) yr[h * D + d] = gv * orow[h * D + d];
        } else {
#pragma omp simd
          for (int d = 0; d < D; ++d) yr[h * D + d] = gh[d] * orow[h * D + d];
        }
      }
    }
  });
}

// do = gate (.) dy                                       (overwrites)
// dz[r, h, e] = gate (1 - gate) sum_{d: e(d) = e} dy[r, h, d] o[r, h, d]   (overwrites)
// (per head: the sum over the head's D values; elementwise: the one value d = e.)
template <class T>
void attn_gate_backward(T* dout, T* dz, const T* dy, const T* gate, const T* o, long rows, int H,
                        int D, int G) {
  const int width = H * D, gw = H * G;
  parallel_for(rows, 16384 / width + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const T* gr = gate + r * gw;
      const T* orow = o + r * width;
      const T* dyr = dy + r * width;
      T* dor = dout + r * width;
      T* dzr = dz + r * gw;
      for (int h = 0; h < H; ++h) {
        const T* gh = gr + h * G;
        const long c0 = static_cast<long>(h) * D;
        if (G == 1) {
          const T gv = gh[0];
          T s = 0;
#pragma omp simd reduction(+ : s)
          for (int d = 0; d < D; ++d) {
            dor[c0 + d] = gv * dyr[c0 + d];
            s += dyr[c0 + d] * orow[c0 + d];
          }
          dzr[h] = gv * (T(1) - gv) * s;
        } else {
#pragma omp simd
          for (int d = 0; d < D; ++d) {
            const T gv = gh[d];
            dor[c0 + d] = gv * dyr[c0 + d];
            dzr[c0 + d] = gv * (T(1) - gv) * dyr[c0 + d] * orow[c0 + d];
          }
        }
      }
    }
  });
}

}  // namespace normlab::ops
