// The BLAS path against the plain reference kernel, every transpose combination, with strides;
// then the float GEMM (the blocked micro-kernels the model runs, with their edge tiles) against the
// reference in double on shapes from 1 x 1 x 1 to the model's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tensor/gemm.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

// The larger of worst and e; a NaN, once seen, stays, so that it fails the bound checked after.
double keep_worst(double worst, double e) { return std::isnan(worst) || e <= worst ? worst : e; }

// Standard normal values into each vector, one vector after the other.
template <class... V>
void fill_normal(Rng& rng, V&... v) {
  ((std::for_each(v.begin(), v.end(), [&](float& x) { x = static_cast<float>(rng.normal()); })), ...);
}

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

TEST(Gemm, FloatMatchesDoubleReferenceOnModelShapes) {
  Rng rng(3);
  // 1000 and 1030 columns: two and three column blocks of at most 512 (gemm.cpp's NC), the last
  // one narrower.
  const int dims[][3] = {{1, 1, 1},      {7, 5, 9},     {13, 67, 3},   {70, 129, 200},
                         {300, 70, 517}, {6, 64, 64},   {64, 256, 64}, {257, 1000, 300},
                         {50, 1030, 71}, {20, 70, 9000}};
  for (const auto& d : dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.f, 1.f}) {
          const int M = d[0], N = d[1], K = d[2], pad = 3;
          const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          std::vector<float> A(static_cast<long>(ta ? K : M) * lda),
              Bm(static_cast<long>(tb ? N : K) * ldb), C1(static_cast<long>(M) * ldc);
          fill_normal(rng, A, Bm, C1);
          std::vector<double> Ad(A.begin(), A.end()), Bd(Bm.begin(), Bm.end()),
              C2(C1.begin(), C1.end());
          gemm<float>(ta, tb, M, N, K, 0.75f, A.data(), lda, Bm.data(), ldb, beta, C1.data(), ldc);
          gemm_ref<double>(ta, tb, M, N, K, 0.75, Ad.data(), lda, Bd.data(), ldb, beta, C2.data(),
                           ldc);
          // |got - want| / (1 + |want|) over the whole of C, padding included (never written).
          double worst = 0;
          for (std::size_t i = 0; i < C1.size(); ++i) {
            const double e = std::fabs(C1[i] - C2[i]) / (1.0 + std::fabs(C2[i]));
            worst = keep_worst(worst, e);
          }
          EXPECT_LE(worst, 1e-5 * std::sqrt(K))
              << "ta=" << ta << " tb=" << tb << " " << M << "x" << N << "x" << K
              << " beta=" << beta;
        }
}

// op(A) = A^T with a row stride whose lines fall into one or two L1 sets (1536, 3072 floats): the
// kernel copies a tile's slice of A^T first. The copy changes no arithmetic, so the result must
// equal, bit for bit, the same product with A at a stride the kernel reads in place (+ 3 floats);
// and it must match the double reference.
TEST(Gemm, TransposedAAtAConflictingStrideEqualsInPlace) {
  Rng rng(11);
  for (const int lda : {1536, 3072})
    for (const auto& d : {std::array<int, 3>{100, 70, 300}, std::array<int, 3>{1536, 64, 40},
                          std::array<int, 3>{7, 130, 600}})
      for (float beta : {0.f, 1.f}) {
        const int M = d[0], N = d[1], K = d[2], ldw = lda + 3;
        std::vector<float> A(static_cast<long>(K) * lda), W(static_cast<long>(K) * ldw),
            Bm(static_cast<long>(K) * N), C1(static_cast<long>(M) * N), C2;
        for (auto& x : A) x = static_cast<float>(rng.normal());
        for (int k = 0; k < K; ++k)
          for (int i = 0; i < M; ++i)
            W[static_cast<long>(k) * ldw + i] = A[static_cast<long>(k) * lda + i];
        fill_normal(rng, Bm, C1);
        C2 = C1;
        std::vector<double> Ad(A.begin(), A.end()), Bd(Bm.begin(), Bm.end()),
            C3(C1.begin(), C1.end());
        gemm<float>(true, false, M, N, K, 0.75f, A.data(), lda, Bm.data(), N, beta, C1.data(), N);
        gemm<float>(true, false, M, N, K, 0.75f, W.data(), ldw, Bm.data(), N, beta, C2.data(), N);
        gemm_ref<double>(true, false, M, N, K, 0.75, Ad.data(), lda, Bd.data(), N, beta, C3.data(),
                         N);
        double worst = 0;
        for (std::size_t i = 0; i < C1.size(); ++i) {
          ASSERT_EQ(C1[i], C2[i]) << "lda=" << lda << " " << M << "x" << N << "x" << K << " at "
                                  << i;
          const double e = std::fabs(C1[i] - C3[i]) / (1.0 + std::fabs(C3[i]));
          worst = keep_worst(worst, e);
        }
        EXPECT_LE(worst, 1e-5 * std::sqrt(K)) << "lda=" << lda << " " << M << "x" << N << "x" << K;
      }
}


// op(A) = A^T is read three ways (src/tensor/gemm.cpp): copied where lda's lines conflict in L1
// (1536), in place with a software prefetch of A^T's next lines (1000, 1539), in place without it
// past kMaxLdaPf (40003). The same sums in the same order: bitwise equal, and near the reference.
TEST(Gemm, TransposedAReadEveryWayGivesTheSameResult) {
  Rng rng(12);
  for (const auto& d : {std::array<int, 3>{100, 70, 300}, std::array<int, 3>{13, 130, 40}})
    for (float beta : {0.f, 1.f}) {
      const int M = d[0], N = d[1], K = d[2];
      std::vector<float> a(static_cast<long>(K) * M), Bm(static_cast<long>(K) * N),
          C0(static_cast<long>(M) * N);
      fill_normal(rng, a, Bm, C0);
      std::vector<double> Ad(a.begin(), a.end()), Bd(Bm.begin(), Bm.end()),
          Cd(C0.begin(), C0.end());
      gemm_ref<double>(true, false, M, N, K, 0.75, Ad.data(), M, Bd.data(), N, beta, Cd.data(), N);
      std::vector<float> first;
      for (const int lda : {1000, 1539, 1536, 40003}) {
        std::vector<float> A(static_cast<long>(K) * lda, std::nanf("")), C = C0;
        for (int k = 0; k < K; ++k)
          std::copy(a.begin() + static_cast<long>(k) * M, a.begin() + static_cast<long>(k + 1) * M,
                    A.begin() + static_cast<long>(k) * lda);
        gemm<float>(true, false, M, N, K, 0.75f, A.data(), lda, Bm.data(), N, beta, C.data(), N);
        double worst = 0;
        for (std::size_t i = 0; i < C.size(); ++i)
          worst = keep_worst(worst, std::fabs(C[i] - Cd[i]) / (1.0 + std::fabs(Cd[i])));
        EXPECT_LE(worst, 1e-5 * std::sqrt(K)) << "lda=" << lda << " " << M << "x" << N << "x" << K;
        if (first.empty())
          first = C;
        else
          for (std::size_t i = 0; i < C.size(); ++i)
            ASSERT_EQ(std::bit_cast<std::uint32_t>(C[i]), std::bit_cast<std::uint32_t>(first[i]))
                << "lda=" << lda << " " << M << "x" << N << "x" << K << " at " << i;
      }
    }
}
}  // namespace
}  // namespace normlab
