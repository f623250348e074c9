// Cross-entropy with z-loss (PaLM, Chowdhery et al. 2022), forward and backward fused per row so
// that a chunk of logits can be turned into its gradient at once and never kept.
// Shapes: logits, dlogits (N, V); targets (N); lse (N).
#pragma once
#include <cmath>

#include "tensor/threading.h"
#include "tensor/vec_math.h"

namespace normlab::ops {

struct CrossEntropySums {
  double ce = 0;      // sum over rows of lse - logit[target]
  double lse_sq = 0;  // sum over rows of lse^2
};

// lse_r = logsumexp(logits_r); ce_r = lse_r - logits_r[t_r]; z-loss_r = z_alpha * lse_r^2.
// When dlogits is not null, it receives the gradient of grad_scale * sum_r (ce_r + z_alpha
// lse_r^2):
//   dlogits_rj = grad_scale * ((1 + 2 z_alpha lse_r) softmax_rj - [j == t_r])   (overwrites)
// dlogits may alias logits. lse may be null. Targets must have been validated by the caller.
// One exp per logit: e_j = exp(x_j - max) is kept in dlogits and rescaled by k / sum_j e_j.
template <class T>
CrossEntropySums cross_entropy_forward_backward(T* dlogits, T* lse, const T* logits,
                                                const int* targets, int N, int V, T z_alpha,
                                                T grad_scale) {
  // Per-chunk partial sums, added in chunk order: the result does not depend on the threads.
  const Chunks chunks(N, 32768 / V + 1);
  double part_ce[kMaxChunks] = {}, part_lsq[kMaxChunks] = {};
  parallel_chunks_indexed(chunks, [&](long chunk, long r0, long r1) {
    double ce = 0, lsq = 0;
    for (long r = r0; r < r1; ++r) {
      const T* x = logits + static_cast<long>(r) * V;
      const T xt = x[targets[r]];
      T m = x[0];
#pragma omp simd reduction(max : m)
      for (int j = 0; j < V; ++j) m = x[j] > m ? x[j] : m;
      T s = 0;
      T* d = dlogits ? dlogits + static_cast<long>(r) * V : nullptr;
      if (d) {
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < V; ++j) {
          const T e = exp_fast(x[j] - m);
          d[j] = e;
          s += e;
        }
      } else {
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < V; ++j) s += exp_fast(x[j] - m);
      }
      const T l = m + std::log(s);
      ce += static_cast<double>(l) - static_cast<double>(xt);
      lsq += static_cast<double>(l) * static_cast<double>(l);
      if (lse) lse[r] = l;
      if (d) {
        const T k = grad_scale * (T(1) + T(2) * z_alpha * l) / s;
#pragma omp simd
        for (int j = 0; j < V; ++j) d[j] *= k;
        d[targets[r]] -= grad_scale;
      }
    }
    part_ce[chunk] = ce;
    part_lsq[chunk] = lsq;
  });
  double ce = 0, lsq = 0;
  for (long c = 0; c < chunks.count; ++c) ce += part_ce[c], lsq += part_lsq[c];
  return {ce, lsq};
}

}  // namespace normlab::ops
