// Token embedding (scaled) plus optional learned absolute positions.
// Shapes: idx (B, T); tok, dtok (V, C); pos, dpos (T_max, C); out, dout (B, T, C).
#pragma once
#include "tensor/threading.h"

namespace normlab::ops {

// out[b,t] = scale * tok[idx[b,t]] + pos[pos0 + t]   (overwrites out; pos may be null)
// Token ids must have been validated by the caller.
template <class T>
void embedding_forward(T* out, const int* idx, const T* tok, const T* pos, int B, int Tn, int C,
                       T scale, int pos0 = 0) {
  parallel_for(static_cast<long>(B) * Tn, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const int t = static_cast<int>(r % Tn);
      const T* e = tok + static_cast<long>(idx[r]) * C;
      T* o = out + r * C;
      if (pos) {
        const T* p = pos + static_cast<long>(pos0 + t) * C;
        for (int c = 0; c < C; ++c) o[c] = scale * e[c] + p[c];
      } else {
        for (int c = 0; c < C; ++c) o[c] = scale * e[c];
      }
    }
  });
}

// dtok[idx[b,t]] += scale * dout[b,t];  dpos[t] += dout[b,t]   (accumulate; dpos may be null)
// Parallel over column blocks so repeated tokens never race.
template <class T>
void embedding_backward(T* dtok, T* dpos, const T* dout, const int* idx, int B, int Tn, int C,
                        T scale) {
  parallel_column_blocks(static_cast<long>(B) * Tn, C, 32, [&](int c0, int c1) {
    for (long r = 0; r < static_cast<long>(B) * Tn; ++r) {
      const T* d = dout + r * C;
      T* e = dtok + static_cast<long>(idx[r]) * C;
      for (int c = c0; c < c1; ++c) e[c] += scale * d[c];
      if (dpos) {
        T* p = dpos + (r % Tn) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  });
}

}  // namespace normlab::ops
