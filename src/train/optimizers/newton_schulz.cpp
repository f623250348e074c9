#include "train/optimizers/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "normlab/errors.h"
#include "tensor/threading.h"

namespace normlab {

namespace {

template <class T>
void round_bf16(T* x, long n, bool on) {
  if constexpr (std::is_same_v<T, float>) {
    if (!on) return;
    parallel_for(n, 32768, [&](long b, long e) {
      for (long i = b; i < e; ++i) x[i] = round_to_bf16(x[i]);
    });
  }
}

}  // namespace

template <class T>
void NewtonSchulz<T>::reserve(long max_elems, long max_short) {
  x_.resize(max_elems);
  x2_.resize(max_elems);
  a_.resize(max_short * max_short);
  b_.resize(max_short * max_short);
}

template <class T>
void NewtonSchulz<T>::run(const T* in, T* out, int rows, int cols, const NsCoefficients& k,
                          GemmPrecision prec) {
  const bool tall = rows > cols;
  const int m = tall ? cols : rows, n = tall ? rows : cols;  // X (m, n), m <= n
  const long mn = static_cast<long>(m) * n;
  NL_CHECK(mn <= static_cast<long>(x_.size()) && static_cast<long>(m) * m <= static_cast<long>(a_.size()),
           "Newton-Schulz scratch too small for ({}, {})", rows, cols);
  const bool bf = prec == GemmPrecision::bf16 && std::is_same_v<T, float>;
  T* X = x_.data();
  T* X2 = x2_.data();
  T* A = a_.data();
  T* B = b_.data();
  if (tall) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) X[static_cast<long>(j) * n + i] = in[static_cast<long>(i) * cols + j];
  } else {
    std::copy(in, in + mn, X);
  }
  round_bf16(X, mn, bf);
  double ss = 0;
  for (long i = 0; i < mn; ++i) ss += static_cast<double>(X[i]) * X[i];
  T norm = static_cast<T>(std::sqrt(ss));
  if (bf) norm = static_cast<T>(round_to_bf16(static_cast<float>(norm)));
  const T div = std::max(norm, static_cast<T>(k.eps));
  parallel_for(mn, 32768, [&](long b, long e) {
    for (long i = b; i < e; ++i) X[i] = X[i] / div;
  });
  round_bf16(X, mn, bf);
  const T a = static_cast<T>(k.a), bcoef = static_cast<T>(k.b), c = static_cast<T>(k.c);
  for (int s = 0; s < k.steps; ++s) {
    // A (m, m) = X X^T
    gemm_p<T>(prec, false, true, m, m, n, T(1), X, n, X, n, T(0), A, m);
    round_bf16(A, static_cast<long>(m) * m, bf);
    // B = b A + c A A
    std::copy(A, A + static_cast<long>(m) * m, B);
    gemm_p<T>(prec, false, false, m, m, m, c, A, m, A, m, bcoef, B, m);
    round_bf16(B, static_cast<long>(m) * m, bf);
    // X2 = a X + B X
    std::copy(X, X + mn, X2);
    gemm_p<T>(prec, false, false, m, n, m, T(1), B, m, X, n, a, X2, n);
    round_bf16(X2, mn, bf);
    std::swap(X, X2);
  }
  if (tall) {
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) out[static_cast<long>(i) * cols + j] = X[static_cast<long>(j) * n + i];
  } else {
    std::copy(X, X + mn, out);
  }
}

template class NewtonSchulz<float>;
template class NewtonSchulz<double>;

}  // namespace normlab
