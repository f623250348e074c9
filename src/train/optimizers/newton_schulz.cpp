#include "train/optimizers/newton_schulz.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "normlab/errors.h"
#include "tensor/threading.h"
#include "train/optimizers/adamw_kernel.h"  // sum_squares

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
  // The reference transposes a tall matrix, iterates X (m, n) with m <= n, and transposes back.
  // Here a tall Y (rows, cols) iterates in place of X = Y^T with the same products read the other
  // way: X X^T = Y^T Y, and (a X + B X)^T = a Y + Y B (B is symmetric): no transposed copies.
  const bool tall = rows > cols;
  const int m = tall ? cols : rows;  // the short side: A and B are (m, m)
  const long mn = static_cast<long>(rows) * cols;
  NL_CHECK(mn <= static_cast<long>(x_.size()) && static_cast<long>(m) * m <= static_cast<long>(a_.size()),
           "Newton-Schulz scratch too small for ({}, {})", rows, cols);
  const bool bf = prec == GemmPrecision::bf16 && std::is_same_v<T, float>;
  T* X = x_.data();
  T* X2 = x2_.data();
  T* A = a_.data();
  T* B = b_.data();
  const auto copy = [](const T* from, T* to, long n) {
    parallel_for(n, 32768, [&](long b, long e) { std::copy(from + b, from + e, to + b); });
  };
  copy(in, X, mn);
  round_bf16(X, mn, bf);
  T norm = static_cast<T>(std::sqrt(sum_squares(X, mn)));
  if (bf) norm = static_cast<T>(round_to_bf16(static_cast<float>(norm)));
  const T div = std::max(norm, static_cast<T>(k.eps));
  parallel_for(mn, 32768, [&](long b, long e) {
    for (long i = b; i < e; ++i) X[i] = X[i] / div;
  });
  round_bf16(X, mn, bf);
  const T a = static_cast<T>(k.a), bcoef = static_cast<T>(k.b), c = static_cast<T>(k.c);
  const long mm = static_cast<long>(m) * m;
  for (int s = 0; s < k.steps; ++s) {
    // A (m, m) = X X^T  (tall: Y^T Y)
    if (tall)
      gemm_p<T>(prec, true, false, m, m, rows, T(1), X, cols, X, cols, T(0), A, m);
    else
      gemm_p<T>(prec, false, true, m, m, cols, T(1), X, cols, X, cols, T(0), A, m);
    round_bf16(A, mm, bf);
    // B = b A + c A A
    copy(A, B, mm);
    gemm_p<T>(prec, false, false, m, m, m, c, A, m, A, m, bcoef, B, m);
    round_bf16(B, mm, bf);
    // X2 = a X + B X  (tall: a Y + Y B)
    copy(X, X2, mn);
    if (tall)
      gemm_p<T>(prec, false, false, rows, cols, m, T(1), X, cols, B, m, a, X2, cols);
    else
      gemm_p<T>(prec, false, false, rows, cols, m, T(1), B, m, X, cols, a, X2, cols);
    round_bf16(X2, mn, bf);
    std::swap(X, X2);
  }
  copy(X, out, mn);
}

template class NewtonSchulz<float>;
template class NewtonSchulz<double>;

}  // namespace normlab
