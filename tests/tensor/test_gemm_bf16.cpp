// The bf16 product (gemm_bf16.h): the rounding helper bit by bit, then the product against a
// double reference on the bf16-rounded inputs (fp32 accumulation bound) and against the exact
// product of the unrounded inputs (bf16 bound), every transpose combination, odd sizes, strides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/gemm_bf16.h"
#include "tensor/rng.h"
#include "tensor/threading.h"

namespace normlab {
namespace {

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// Reference rounding by value: of the two bf16 neighbours of x (its truncation t and t + 1 ulp),
// the nearer in exact (double) arithmetic, the even one on a tie. The neighbour past the largest
// finite bf16 is the infinity, taken as 2^128 (IEEE rounds as if the exponent were unbounded).
std::uint16_t bf16_reference(std::uint32_t u) {
  const float x = from_bits(u);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  if (std::isinf(x)) return static_cast<std::uint16_t>(u >> 16);
  const std::uint32_t t = u >> 16;  // same sign, magnitude truncated
  auto value = [](std::uint32_t h) {
    if ((h & 0x7FFF) == 0x7F80)
      return std::copysign(std::ldexp(1.0, 128), (h & 0x8000) ? -1.0 : 1.0);
    return static_cast<double>(from_bits(h << 16));
  };
  const double lo = value(t), hi = value(t + 1), xd = x;
  const double dlo = std::fabs(xd - lo), dhi = std::fabs(hi - xd);
  if (dlo < dhi) return static_cast<std::uint16_t>(t);
  if (dhi < dlo) return static_cast<std::uint16_t>(t + 1);
  return static_cast<std::uint16_t>((t & 1) ? t + 1 : t);
}

TEST(Bf16Round, KnownValues) {
  struct Case {
    std::uint32_t in;
    std::uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x3F800000, 0x3F80, "1"},
      {0xBF800000, 0xBF80, "-1"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x3F807FFF, 0x3F80, "just below the half: down"},
      {0x3F808000, 0x3F80, "tie, even below: down"},
      {0x3F808001, 0x3F81, "just above the half: up"},
      {0x3F818000, 0x3F82, "tie, odd below: up to even"},
      {0xBF818000, 0xBF82, "negative tie, odd below: up in magnitude"},
      {0x3FFF8000, 0x4000, "tie carrying into the exponent"},
      {0x7F800000, 0x7F80, "+inf"},
      {0xFF800000, 0xFF80, "-inf"},
      {0x7F7FFFFF, 0x7F80, "FLT_MAX overflows to inf"},
      {0x7F7F7FFF, 0x7F7F, "largest value that stays finite"},
      {0x7FC00000, 0x7FC0, "quiet NaN"},
      {0x7F800001, 0x7FC0, "signalling NaN, payload in the low bits: stays NaN, not inf"},
      {0xFF800001, 0xFFC0, "negative NaN keeps its sign"},
      {0x7FA00000, 0x7FE0, "NaN payload in the kept bits"},
      {0x00000001, 0x0000, "smallest subnormal: to zero"},
      {0x00008000, 0x0000, "subnormal tie, even below"},
      {0x00018000, 0x0002, "subnormal tie, odd below"},
      {0x00008001, 0x0001, "subnormal above the half"},
      {0x007FFFFF, 0x0080, "largest subnormal rounds to the smallest normal"},
      {0x80018000, 0x8002, "negative subnormal tie"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(bf16_bits(from_bits(c.in)), c.out) << c.what;
    EXPECT_EQ(bf16_reference(c.in), c.out) << "reference: " << c.what;
  }
  EXPECT_TRUE(std::isnan(round_to_bf16(from_bits(0x7F800001))));
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-9f), 1.0f);
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f + 0x1p-9f), 1.0f + 0x1p-7f);
}

TEST(Bf16Round, MatchesValueReferenceOnRandomBits) {
  Rng rng(11);
  for (int i = 0; i < 1 << 20; ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng.next_u64() >> 32);
    if (i % 4 == 1) u = (u & 0xFFFF0000u) | 0x8000u;  // ties
    if (i % 4 == 2) u &= 0x807FFFFFu;                 // subnormals
    ASSERT_EQ(bf16_bits(from_bits(u)), bf16_reference(u)) << std::hex << u;
  }
}

// ---------------------------------------------------------------------------------------------

struct Shape {
  int M, N, K;
};

using GemmFn = std::function<void(bool, bool, int, int, int, float, const float*, int, const float*,
                                  int, float, float*, int)>;

// The kernels this CPU can run (rounded_float and portable everywhere).
std::vector<Bf16Kernel> available_kernels() {
  std::vector<Bf16Kernel> ks;
  for (Bf16Kernel k : kBf16Kernels)
    if (bf16_kernel_available(k)) ks.push_back(k);
  return ks;
}

GemmFn with_kernel(Bf16Kernel k) {
  return [k](bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
             const float* B, int ldb, float beta, float* C,
             int ldc) { gemm_bf16_with(k, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); };
}

// C = alpha op(A) op(B) + beta C0 in double, on inputs mapped by f (identity or bf16 rounding);
// also sum_k |alpha a b| + |beta C0| per element for the error bounds.
void reference(bool ta, bool tb, const Shape& s, float alpha, const std::vector<float>& A, int lda,
               const std::vector<float>& B, int ldb, float beta, const std::vector<float>& C0,
               int ldc, bool round, std::vector<double>& out, std::vector<double>& mag) {
  out.assign(static_cast<std::size_t>(s.M) * s.N, 0.0);
  mag.assign(out.size(), 0.0);
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j) {
      double acc = 0, sa = 0;
      for (int k = 0; k < s.K; ++k) {
        float a = ta ? A[static_cast<long>(k) * lda + i] : A[static_cast<long>(i) * lda + k];
        float b = tb ? B[static_cast<long>(j) * ldb + k] : B[static_cast<long>(k) * ldb + j];
        if (round) a = round_to_bf16(a), b = round_to_bf16(b);
        acc += static_cast<double>(a) * b;
        sa += std::fabs(static_cast<double>(a) * b);
      }
      const double c0 = beta == 0.f ? 0.0 : static_cast<double>(beta) * C0[i * ldc + j];
      out[i * s.N + j] = alpha * acc + c0;
      mag[i * s.N + j] = std::fabs(alpha) * sa + std::fabs(c0);
    }
}

struct Case {
  bool ta, tb;
  Shape s;
  float alpha, beta;
  int lda, ldb, ldc;
  std::vector<float> A, B, C0;
};

Case make_case(Rng& rng, bool ta, bool tb, Shape s, float alpha, float beta, int pad) {
  Case c{ta,        tb, s,  alpha, beta, (ta ? s.M : s.K) + pad, (tb ? s.K : s.N) + pad,
         s.N + pad, {}, {}, {}};
  c.A.resize(static_cast<std::size_t>(ta ? s.K : s.M) * c.lda);
  c.B.resize(static_cast<std::size_t>(tb ? s.N : s.K) * c.ldb);
  c.C0.resize(static_cast<std::size_t>(s.M) * c.ldc);
  for (auto& x : c.A) x = static_cast<float>(rng.normal());
  for (auto& x : c.B) x = static_cast<float>(rng.normal());
  // beta = 0: C must not be read, so it starts as NaN
  for (auto& x : c.C0)
    x = beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(rng.normal());
  return c;
}

std::vector<float> run(const GemmFn& f, const Case& c) {
  std::vector<float> C = c.C0;
  f(c.ta, c.tb, c.s.M, c.s.N, c.s.K, c.alpha, c.A.data(), c.lda, c.B.data(), c.ldb, c.beta,
    C.data(), c.ldc);
  return C;
}

// 1030 and 2100 columns: two and three blocks of columns of the AVX512-BF16 kernel (at most 1024
// each), one and two of the AMX kernel's (at most 2048).
const Shape kShapes[] = {
    {1, 1, 1},     {5, 3, 1},      {7, 13, 3},     {13, 70, 37},    {6, 64, 256},   {31, 129, 259},
    {97, 65, 513}, {50, 1030, 71}, {20, 2100, 40}, {200, 300, 101}, {33, 17, 4200},
};

// fp32 accumulation of K bf16 products (each exact), the alpha scale and the beta add: a few
// roundings of relative size u = 2^-24 per term. A factor 2 over the classic K u bound.
double fp32_bound(int K, double mag) { return 2.0 * (K + 3) * 0x1p-24 * mag + 1e-30; }

void check_against_rounded_reference(const GemmFn& f, const char* name) {
  Rng rng(7);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const Shape& s : kShapes)
        for (float alpha : {0.75f, 1.f})  // alpha = 1, beta = 0: AMX stores full blocks directly
          for (float beta : {0.f, -0.5f}) {
            const Case c = make_case(rng, ta, tb, s, alpha, beta, 3);
            const std::vector<float> C = run(f, c);
            std::vector<double> ref, mag;
            reference(ta, tb, s, c.alpha, c.A, c.lda, c.B, c.ldb, beta, c.C0, c.ldc, true, ref,
                      mag);
            int bad = 0;
            for (int i = 0; i < s.M; ++i) {
              for (int j = 0; j < s.N; ++j) {
                const double got = C[i * c.ldc + j], want = ref[i * s.N + j];
                if (!(std::fabs(got - want) <= fp32_bound(s.K, mag[i * s.N + j])) && bad++ < 3)
                  ADD_FAILURE() << name << " ta=" << ta << " tb=" << tb << " M,N,K=" << s.M << ","
                                << s.N << "," << s.K << " alpha=" << alpha << " beta=" << beta
                                << " C(" << i << "," << j << ") = " << got << ", reference "
                                << want;
              }
              // the padding between rows is never written
              for (int j = s.N; j < c.ldc; ++j)
                EXPECT_TRUE(std::isnan(C[i * c.ldc + j]) ? std::isnan(c.C0[i * c.ldc + j])
                                                         : C[i * c.ldc + j] == c.C0[i * c.ldc + j]);
            }
          }
}

TEST(GemmBf16, MatchesDoubleReferenceOnRoundedInputs) {
  check_against_rounded_reference(gemm_bf16, bf16_kernel_name(bf16_kernel()));
}

// Every kernel this CPU can run (on an AMX machine all four), by itself.
TEST(GemmBf16, EveryKernelMatchesDoubleReferenceOnRoundedInputs) {
  const std::vector<Bf16Kernel> ks = available_kernels();
  for (Bf16Kernel k : ks) check_against_rounded_reference(with_kernel(k), bf16_kernel_name(k));
  EXPECT_GE(ks.size(), 2u);  // rounded_float and portable run everywhere
}

TEST(GemmBf16, KernelChoice) {
  const Bf16Kernel best = bf16_kernel();
  EXPECT_TRUE(bf16_kernel_available(best));
  EXPECT_EQ(bf16_hardware(), best == Bf16Kernel::amx || best == Bf16Kernel::avx512bf16);
  // the best available comes first: amx, then avx512bf16, then rounded_float
  if (bf16_kernel_available(Bf16Kernel::amx))
    EXPECT_EQ(best, Bf16Kernel::amx);
  else if (bf16_kernel_available(Bf16Kernel::avx512bf16))
    EXPECT_EQ(best, Bf16Kernel::avx512bf16);
  else
    EXPECT_EQ(best, Bf16Kernel::rounded_float);
  set_bf16_kernel(Bf16Kernel::portable);
  EXPECT_EQ(bf16_kernel(), Bf16Kernel::portable);
  // gemm_bf16 runs the chosen kernel: the same bits as asking for it
  Rng rng(5);
  const Case c = make_case(rng, false, true, {20, 40, 90}, 1.f, 0.f, 0);
  const std::vector<float> chosen = run(gemm_bf16, c);
  const std::vector<float> direct = run(with_kernel(Bf16Kernel::portable), c);
  EXPECT_EQ(0, std::memcmp(chosen.data(), direct.data(), chosen.size() * sizeof(float)));
  reset_bf16_kernel();
  EXPECT_EQ(bf16_kernel(), best);
  // names: the enumerator's spelling or the reported name; anything else is refused by name
  EXPECT_EQ(bf16_kernel_from_name("rounded_float"), Bf16Kernel::rounded_float);
  for (Bf16Kernel k : kBf16Kernels) EXPECT_EQ(bf16_kernel_from_name(bf16_kernel_name(k)), k);
  try {
    bf16_kernel_from_name("amx2");
    ADD_FAILURE() << "bf16_kernel_from_name accepted amx2";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'amx2'"), std::string::npos) << e.what();
  }
  for (Bf16Kernel k : kBf16Kernels) {
    if (bf16_kernel_available(k)) continue;
    try {
      set_bf16_kernel(k);
      ADD_FAILURE() << "set_bf16_kernel accepted " << bf16_kernel_name(k);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bf16_kernel_name(k)), std::string::npos) << e.what();
    }
    EXPECT_EQ(bf16_kernel(), best);  // unchanged
  }
}

// Against the exact product of the unrounded inputs: |bf16(x) - x| <= u |x| with u = 2^-8, so
// each product is off by at most (2u + u^2) |a b|, plus the fp32 accumulation.
double bf16_bound(int K, double mag) {
  const double u = 0x1p-8;
  return (2 * u + u * u) * mag + fp32_bound(K, mag);
}

TEST(GemmBf16, WithinBf16BoundOfExactProduct) {
  Rng rng(9);
  for (Bf16Kernel k : available_kernels()) {
    SCOPED_TRACE(bf16_kernel_name(k));
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Shape s{37, 90, 301};
        const Case c = make_case(rng, ta, tb, s, 1.0f, 0.f, 2);
        const std::vector<float> C = run(with_kernel(k), c);
        std::vector<double> exact, mag;
        reference(ta, tb, s, 1.f, c.A, c.lda, c.B, c.ldb, 0.f, c.C0, c.ldc, false, exact, mag);
        double worst = 0;  // largest error relative to sum |a b|
        for (int i = 0; i < s.M; ++i)
          for (int j = 0; j < s.N; ++j) {
            const double e = std::fabs(C[i * c.ldc + j] - exact[i * s.N + j]);
            EXPECT_LE(e, bf16_bound(s.K, mag[i * s.N + j])) << "ta=" << ta << " tb=" << tb;
            worst = std::max(worst, e / mag[i * s.N + j]);
          }
        // The inputs were rounded: the error is far above what fp32 inputs would give
        // (K 2^-24 ~ 2e-5 relative at most, typically ~1e-7 here).
        EXPECT_GT(worst, 0x1p-12) << "the inputs do not look rounded to bf16";
      }
  }
}

// Inputs just below the next bf16 value, 1 + m 2^-7 + 0.99 2^-7 with m < 16: round-to-nearest is
// off by 0.01 ulp, truncation by 0.99 ulp (> 0.87 2^-7 relative per input), so a product with
// truncated inputs misses by > 1.7 2^-7 relative, beyond the 2u = 2^-7 bound; all positive, the
// errors do not cancel.
TEST(GemmBf16, TruncationWouldBreakTheBound) {
  Rng rng(13);
  const Shape s{40, 70, 64};  // 40 rows and 64 sums: AMX's vector packing, not only its edges
  for (Bf16Kernel k : available_kernels()) {
    SCOPED_TRACE(bf16_kernel_name(k));
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Case c = make_case(rng, ta, tb, s, 1.0f, 0.f, 1);
        auto near_up = [&] {
          const int m = static_cast<int>(rng.uniform() * 16);
          return 1.0f + static_cast<float>(m) * 0x1p-7f + 0.99f * 0x1p-7f;
        };
        for (auto& x : c.A) x = near_up();
        for (auto& x : c.B) x = near_up();
        const std::vector<float> C = run(with_kernel(k), c);
        std::vector<double> exact, mag;
        reference(ta, tb, s, 1.f, c.A, c.lda, c.B, c.ldb, 0.f, c.C0, c.ldc, false, exact, mag);
        for (int i = 0; i < s.M; ++i)
          for (int j = 0; j < s.N; ++j) {
            const double e = std::fabs(C[i * c.ldc + j] - exact[i * s.N + j]);
            // round-to-nearest: 2 x 0.01 2^-7 relative per product, well inside
            EXPECT_LE(e, 0.1 * 0x1p-7 * mag[i * s.N + j] + fp32_bound(s.K, mag[i * s.N + j]));
            EXPECT_LE(e, bf16_bound(s.K, mag[i * s.N + j]));
          }
      }
  }
}

TEST(GemmBf16, NonFiniteInputsPropagate) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Bf16Kernel k : available_kernels()) {
    SCOPED_TRACE(bf16_kernel_name(k));
    const float a[3] = {1.f, inf, 2.f}, b[3] = {1.f, 1.f, nan};
    float c[3] = {0, 0, 0};
    // C(3, 1) = A(3, 1) B(1, 1): c = a * b[0]
    gemm_bf16_with(k, false, false, 3, 1, 1, 1.f, a, 1, b, 1, 0.f, c, 1);
    EXPECT_EQ(c[0], 1.f);
    EXPECT_EQ(c[1], inf);
    EXPECT_EQ(c[2], 2.f);
    // a NaN in B reaches every row
    gemm_bf16_with(k, false, false, 3, 1, 1, 1.f, a, 1, b + 2, 1, 0.f, c, 1);
    for (float x : c) EXPECT_TRUE(std::isnan(x));
    // packing rounds like the helper: x * 1 = bf16(x)
    for (float x : {1.0f + 0x1p-8f, 3.14159f, -2.71828e-20f, 6.5e30f, 3.4e38f}) {
      const float one = 1.f;
      float y = 0;
      gemm_bf16_with(k, false, true, 1, 1, 1, 1.f, &x, 1, &one, 1, 0.f, &y, 1);
      EXPECT_EQ(y, round_to_bf16(x)) << x;
    }
  }
}

// The same at sizes the packers move 16 x 16 words at a time (AMX's vector paths, with every
// transpose combination): an infinity in op(A) makes its row of C infinite, a NaN in op(B) its
// column NaN; and op(A) times an identity gives bf16(op(A)) exactly, ties to even included.
TEST(GemmBf16, NonFiniteAndRoundingThroughTheVectorPacking) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Shape s{40, 40, 64};
  Rng rng(17);
  for (Bf16Kernel k : available_kernels()) {
    SCOPED_TRACE(bf16_kernel_name(k));
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        Case c = make_case(rng, ta, tb, s, 1.f, 0.f, 0);
        // op(A)(2, 5) = inf, op(B)(7, 3) = NaN
        (ta ? c.A[5 * c.lda + 2] : c.A[2 * c.lda + 5]) = inf;
        (tb ? c.B[3 * c.ldb + 7] : c.B[7 * c.ldb + 3]) = nan;
        const std::vector<float> C = run(with_kernel(k), c);
        for (int j = 0; j < s.N; ++j) {
          if (j == 3) continue;
          EXPECT_TRUE(std::isinf(C[2 * c.ldc + j])) << "ta=" << ta << " tb=" << tb << " j=" << j;
        }
        for (int i = 0; i < s.M; ++i)
          EXPECT_TRUE(std::isnan(C[i * c.ldc + 3])) << "ta=" << ta << " tb=" << tb << " i=" << i;

        // C = op(A) I with op(A) holding values that round up, down and to even
        Case e = make_case(rng, ta, tb, {40, 64, 64}, 1.f, 0.f, 0);
        const float specials[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.14159f, -2.71828e-20f,
                                  6.5e30f,        -1.0f - 0x1p-9f};
        for (std::size_t i = 0; i < e.A.size(); ++i)
          if (i % 7 == 0) e.A[i] = specials[(i / 7) % 6];
        std::fill(e.B.begin(), e.B.end(), 0.f);
        for (int d = 0; d < 64; ++d) e.B[d * e.ldb + d] = 1.f;  // symmetric: op(B) = I either way
        const std::vector<float> Y = run(with_kernel(k), e);
        int bad = 0;
        for (int i = 0; i < 40; ++i)
          for (int j = 0; j < 64; ++j) {
            const float x = ta ? e.A[j * e.lda + i] : e.A[i * e.lda + j];
            if (Y[i * e.ldc + j] != round_to_bf16(x) && bad++ < 3)
              ADD_FAILURE() << "ta=" << ta << " tb=" << tb << " C(" << i << "," << j
                            << ") = " << Y[i * e.ldc + j] << ", bf16(" << x
                            << ") = " << round_to_bf16(x);
          }
      }
  }
}

// C = the sums (alpha 1, beta 0) and C = the sums + 0 (alpha 1, beta 1 on a zero C) are the same
// values, whichever way a kernel writes them out (AMX: full 32 x 32 blocks straight from the tile
// registers in the first case, through its staging buffer in the second). Zeros compare equal
// whatever their sign.
TEST(GemmBf16, DirectStoreEqualsStagedStore) {
  Rng rng(11);
  for (Bf16Kernel k : available_kernels())
    for (bool ta : {false, true})
      for (const Shape& s : {Shape{64, 64, 40}, Shape{97, 130, 300}, Shape{32, 96, 4200}}) {
        Case c = make_case(rng, ta, !ta, s, 1.f, 0.f, 5);
        const std::vector<float> direct = run(with_kernel(k), c);
        c.beta = 1.f;
        std::fill(c.C0.begin(), c.C0.end(), 0.f);
        const std::vector<float> staged = run(with_kernel(k), c);
        int bad = 0;
        for (int i = 0; i < s.M; ++i)
          for (int j = 0; j < s.N; ++j) {
            const float a = direct[i * c.ldc + j], b = staged[i * c.ldc + j];
            if (!(a == b) && bad++ < 3)
              ADD_FAILURE() << bf16_kernel_name(k) << " ta=" << ta << " M,N,K=" << s.M << "," << s.N
                            << "," << s.K << " C(" << i << "," << j << ") = " << a << " direct, "
                            << b << " staged";
          }
      }
}

TEST(GemmBf16, ResultDoesNotDependOnThreadCount) {
  Rng rng(3);
  const int before = thread_count();
  for (Bf16Kernel k : available_kernels()) {
    for (bool ta : {false, true}) {
      const Case c = make_case(rng, ta, !ta, {150, 260, 300}, 1.f, 0.5f, 0);
      set_thread_count(1);
      const std::vector<float> c1 = run(with_kernel(k), c);
      set_thread_count(2);
      const std::vector<float> c2 = run(with_kernel(k), c);
      EXPECT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)))
          << bf16_kernel_name(k) << " ta=" << ta;
    }
  }
  set_thread_count(before);
}

}  // namespace
}  // namespace normlab
