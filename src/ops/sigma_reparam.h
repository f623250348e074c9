// σReparam (Zhai et al. 2023, "Stabilizing Transformer Training by Preventing Attention Entropy
// Collapse", ICML; apple/ml-sigma-reparam): a linear weight W (O, I) is used as
//   W_hat = (gamma / sigma) W,        sigma = u^T W v
// with gamma a learned scalar and u (O), v (I) unit vectors that track W's top singular vectors
// by power iteration, one step per training step, with no gradient through them:
//   u <- normalize(W v),  v <- normalize(W^T u)        (sigma_power_step)
// the order of torch.nn.utils.parametrizations.spectral_norm and of the reference's
// SpectralNormedWeight.get_sigma (its persistent vector is our v). normalize(x) = x / max(|x|,
// 1e-12), torch's eps. Forward and backward take sigma from sigma_estimate: dsigma/dW = u v^T.
// Sums run in double, in a fixed order (the same at any thread count).
#pragma once
#include <algorithm>
#include <cmath>

#include "ops/accum.h"
#include "tensor/threading.h"

namespace normlab::ops {

inline constexpr double kSigmaNormEps = 1e-12;

// x (n) <- x / max(|x|, 1e-12); returns |x|.
template <class T>
double sigma_normalize(T* x, long n) {
  double ss = 0;
  for (long i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const double nrm = std::sqrt(ss);
  const double inv = 1.0 / std::max(nrm, kSigmaNormEps);
  for (long i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] * inv);
  return nrm;
}

// y (O) = W v, each row summed in double.
template <class T>
void sigma_matvec(T* y, const T* W, const T* v, int O, int I) {
  parallel_for(O, 16384 / I + 1, [&](long r0, long r1) {
    for (long o = r0; o < r1; ++o) {
      const T* w = W + o * I;
      double s = 0;
      for (int i = 0; i < I; ++i) s += static_cast<double>(w[i]) * v[i];
      y[o] = static_cast<T>(s);
    }
  });
}

// y (I) = W^T u, each column summed in double over the rows in order (column blocks in parallel).
template <class T>
void sigma_matvec_t(T* y, const T* W, const T* u, int O, int I) {
  parallel_column_blocks(O, I, 64, [&](int c0, int c1) {
    double acc[64];
    for (int c = c0; c < c1; ++c) acc[c - c0] = 0;
    for (long o = 0; o < O; ++o) {
      const T* w = W + o * I;
      const double uo = u[o];
      for (int c = c0; c < c1; ++c) acc[c - c0] += uo * w[c];
    }
    for (int c = c0; c < c1; ++c) y[c] = static_cast<T>(acc[c - c0]);
  });
}

// One power-iteration step: u (O) <- normalize(W v), then v (I) <- normalize(W^T u).
template <class T>
void sigma_power_step(T* u, T* v, const T* W, int O, int I) {
  sigma_matvec(u, W, v, O, I);
  sigma_normalize(u, O);
  sigma_matvec_t(v, W, u, O, I);
  sigma_normalize(v, I);
}

// sigma = u^T W v (the rows' dot products in double, added in row order).
template <class T>
double sigma_estimate(const T* u, const T* v, const T* W, int O, int I) {
  double s = 0;
  for (long o = 0; o < O; ++o) {
    const T* w = W + o * I;
    double r = 0;
    for (int i = 0; i < I; ++i) r += static_cast<double>(w[i]) * v[i];
    s += static_cast<double>(u[o]) * r;
  }
  return s;
}

// Power iteration from v as given (u is overwritten) until sigma changes by less than `rtol`
// relative, at most `max_iters` steps; returns sigma = u^T W v. Initialisation: the reference
// starts from an SVD's top singular vectors, which this converges to.
template <class T>
double sigma_power_converge(T* u, T* v, const T* W, int O, int I, int max_iters = 500,
                            double rtol = 1e-7) {
  sigma_normalize(v, I);
  double prev = 0, s = 0;
  for (int k = 0; k < max_iters; ++k) {
    sigma_power_step(u, v, W, O, I);
    s = sigma_estimate(u, v, W, O, I);
    if (k > 0 && std::fabs(s - prev) <= rtol * std::fabs(s)) break;
    prev = s;
  }
  return s;
}

// W_hat (O, I) = (gamma / sigma) W   (overwrites)
template <class T>
void sigma_reparam_forward(T* w_hat, const T* W, T gamma, double sigma, int O, int I) {
  const T c = static_cast<T>(static_cast<double>(gamma) / sigma);
  const long n = static_cast<long>(O) * I;
  parallel_for(n, 32768, [&](long b, long e) {
#pragma omp simd
    for (long i = b; i < e; ++i) w_hat[i] = c * W[i];
  });
}

// With G = dL/dW_hat and k = <G, W> / sigma (u, v fixed):
//   dgamma += k                                          (accumulates)
//   dW (+)= (gamma / sigma) (G - k u v^T)                (Accum::add adds, ::overwrite replaces)
// from W_hat = gamma W / sigma and dsigma/dW = u v^T: dL/dW = (gamma / sigma) G
// - (gamma / sigma^2) <G, W> u v^T.
template <class T>
void sigma_reparam_backward(T* dW, T* dgamma, const T* G, const T* W, const T* u, const T* v,
                            T gamma, double sigma, int O, int I, Accum accum) {
  double gw = 0;
  const long n = static_cast<long>(O) * I;
  for (long i = 0; i < n; ++i) gw += static_cast<double>(G[i]) * W[i];
  const double k = gw / sigma;
  *dgamma += static_cast<T>(k);
  const T c = static_cast<T>(static_cast<double>(gamma) / sigma), kt = static_cast<T>(k);
  parallel_for(O, 16384 / I + 1, [&](long r0, long r1) {
    for (long o = r0; o < r1; ++o) {
      const T* g = G + o * I;
      T* d = dW + o * I;
      const T ku = kt * u[o];
      if (accum == Accum::add) {
#pragma omp simd
        for (int i = 0; i < I; ++i) d[i] += c * (g[i] - ku * v[i]);
      } else {
#pragma omp simd
        for (int i = 0; i < I; ++i) d[i] = c * (g[i] - ku * v[i]);
      }
    }
  });
}

}  // namespace normlab::ops
