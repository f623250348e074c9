// One build of normlab's GEMMs behind a C entry point for bench/ab_gemm.cpp; compiled with
// -Dnormlab=<namespace> -DAB_NAME=<entry point> (bench/ab_gemm.sh).
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/threading.h"

extern "C" void AB_NAME(int ta, int tb, int M, int N, int K, const float* A, int lda,
                        const float* B, int ldb, float beta, float* C, int ldc, int bf16,
                        int threads) {
  static const int set = normlab::set_thread_count(threads);
  (void)set;
  if (bf16)
    normlab::gemm_bf16(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
  else
    normlab::gemm<float>(ta, tb, M, N, K, 1.f, A, lda, B, ldb, beta, C, ldc);
}
