// Matrix products, row-major. `gemm` is the fast path; `gemm_ref` is the plain triple loop kept as
// the test oracle. All compute
//   C(M, N) = alpha * op(A)(M, K) * op(B)(K, N) + beta * C
// where op(X) is X or X^T as selected by trans_a / trans_b, and lda/ldb/ldc are row strides of the
// matrices as stored (so A is (M, K) stored with stride lda when !trans_a, (K, M) when trans_a).
// With beta = 0, C is not read (it may hold NaN).
//
// float: normlab's own cache-blocked kernel (Goto & van de Geijn 2008; BLIS's five loops around a
// 6 x 64 AVX-512 micro-tile, or 6 x 16 strips of it with AVX2 + FMA only), parallelised over tiles
// of C on normlab's thread pool, so that the process has one threading policy (threading.h) and
// no second pool of spinning BLAS threads. Both kernels give bitwise the same results. Without
// AVX2 + FMA the parallel path goes to the BLAS. double: the BLAS (tests, gradient checks).
#pragma once

namespace normlab {

// Uses the pool's threads when called from serial code and the product is large enough; runs on
// the calling thread alone when called from inside a pool job.
template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B,
          int ldb, T beta, T* C, int ldc);

// Always on the calling thread only (for per-tile products inside parallel regions).
template <class T>
void gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
                 const T* B, int ldb, T beta, T* C, int ldc);

template <class T>
void gemm_ref(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda,
              const T* B, int ldb, T beta, T* C, int ldc) {
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = 0;
      for (int k = 0; k < K; ++k) {
        const double a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      C[i * ldc + j] = static_cast<T>(alpha * acc + (beta == T(0) ? 0.0 : beta * C[i * ldc + j]));
    }
}

}  // namespace normlab
