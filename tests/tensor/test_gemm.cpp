// The BLAS path against the plain reference kernel, every transpose combination, with strides.
#include <gtest/gtest.h>

#include <vector>

#include "tensor/gemm.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

template <class T>
void check_all(double tol) {
  Rng rng(5);
  const int M = 7, N = 5, K = 9, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (T beta : {T(0), T(0.5)}) {
        const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        std::vector<T> A((ta ? K : M) * lda), Bm((tb ? N : K) * ldb), C1(M * ldc), C2;
        for (auto& x : A) x = static_cast<T>(rng.normal());
        for (auto& x : Bm) x = static_cast<T>(rng.normal());
        for (auto& x : C1) x = static_cast<T>(rng.normal());
        C2 = C1;
        gemm<T>(ta, tb, M, N, K, T(1.25), A.data(), lda, Bm.data(), ldb, beta, C1.data(), ldc);
        gemm_ref<T>(ta, tb, M, N, K, T(1.25), A.data(), lda, Bm.data(), ldb, beta, C2.data(), ldc);
        for (int i = 0; i < M; ++i)
          for (int j = 0; j < ldc; ++j)
            EXPECT_NEAR(C1[i * ldc + j], C2[i * ldc + j], tol) << "ta=" << ta << " tb=" << tb;
      }
}

TEST(Gemm, FloatMatchesReference) { check_all<float>(1e-4); }
TEST(Gemm, DoubleMatchesReference) { check_all<double>(1e-12); }

}  // namespace
}  // namespace normlab
