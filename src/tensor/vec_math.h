// exp, tanh and erf for float written so that loops over them vectorise (branch-free, no library calls):
// std::exp / std::tanh stay scalar calls without -ffast-math, and in the MLP, the softmaxes and
// the soft-caps they cost as much as the matrix products. The double overloads are the plain
// library functions, so gradient checks (double) keep their exact references.
// Both keep NaN and the infinities observable: NaN in, NaN out; exp(+inf) = inf, exp(-inf) = 0.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace normlab {

// Always inlined: loops over these must see their body to vectorise (GCC otherwise may keep a
// call it judges cold and give up on the loop).
#define NORMLAB_INLINE inline __attribute__((always_inline))

// For a function whose loops map elements one to one (no sum, maximum or other reduction across
// elements): with AVX-512, GCC vectorises it with 512-bit registers instead of the 256 bits it
// prefers for Intel targets (-march=native on Sapphire Rapids implies prefer-vector-width=256). The
// exp and tanh chains of the activations and soft-caps are bound by the vector ALUs, and there one
// zmm operation does the work of two ymm ones: GPT-2's tanh GELU over 2048 x 1536 elements, one
// thread of the Intel machine of bench/notes.md, 1.27x forward and 1.45x backward. Each element
// goes through the same operations as with 256 bits, so the results are bitwise the same (a
// reduction's order would change with the width: those loops keep the default). noinline: GCC
// drops the preference where it inlines the function into a caller without it.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#define NORMLAB_WIDE_MAP __attribute__((target("prefer-vector-width=512"), noinline))
#else
#define NORMLAB_WIDE_MAP
#endif

// c ? a : b, chosen on the bits: the same value as the conditional expression, but both sides are
// computed, so that a loop over it vectorises without AVX-512's masked operations. (GCC does not
// if-convert a floating-point operation that only one side of a ?: needs, since it might trap:
// with AVX2 only, such a loop stays scalar.)
NORMLAB_INLINE float select_bits(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & m) |
                              (std::bit_cast<std::uint32_t>(b) & ~m));
}

// exp(x), relative error below 2e-7 on the whole float range: Cody-Waite reduction
// x = n ln2 + r, |r| <= ln2 / 2, then Cephes' degree-6 polynomial for e^r, times 2^n.
// Below ln FLT_MIN it returns 0 (the true value is subnormal).
NORMLAB_INLINE float exp_fast(float x) {
  constexpr float hi = 88.7228391116729996f, lo = -87.3365447505531f;  // ln FLT_MAX, ln FLT_MIN
  const float xc = select_bits(x > hi, hi, select_bits(x < lo, lo, x));
  constexpr float magic = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = xc * 1.44269504088896341f + magic;
  const float n = t - magic;
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(magic);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  p = p * (r * r) + r + 1.f;
  // 2^n in two factors, so that both stay normal for every n in [-126, 128].
  const std::int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23),
              s2 = std::bit_cast<float>((n2 + 127) << 23);
  const float y = p * s1 * s2;
  return select_bits(x > hi, std::bit_cast<float>(0x7f800000), select_bits(x < lo, 0.f, y));
}

// The [13/6] rational approximation of tanh that tanh_fast uses below |x| = 0.625: p / q.
NORMLAB_INLINE void tanh_rational_terms(float xc, float& p, float& q) {
  const float x2 = xc * xc;
  p = -2.76076847742355e-16f;
  p = p * x2 + 2.00018790482477e-13f;
  p = p * x2 + -8.60467152213735e-11f;
  p = p * x2 + 5.12229709037114e-08f;
  p = p * x2 + 1.48572235717979e-05f;
  p = p * x2 + 6.37261928875436e-04f;
  p = p * x2 + 4.89352455891786e-03f;
  p = p * xc;
  q = 1.19825839466702e-06f;
  q = q * x2 + 1.18534705686654e-04f;
  q = q * x2 + 2.26843463243900e-03f;
  q = q * x2 + 4.89352518554385e-03f;
}

// tanh(x): for |x| < 0.625 the [13/6] rational approximation of Eigen (generic_fast_tanh_float,
// relative error below 3e-7); above, (e - 1) / (e + 1), e = e^{2|x|} from exp_fast, whose error
// (~1e-7) keeps 1 - tanh^2 accurate near saturation; |x| > 9 gives exactly +-1 as float tanh does.
NORMLAB_INLINE float tanh_fast(float x) {
  constexpr float c = 7.99881172180175781f;
  const float xc = select_bits(x > c, c, select_bits(x < -c, -c, x));
  float p, q;
  tanh_rational_terms(xc, p, q);
  // One division for both branches: p / q, or (e - 1) / (e + 1) with e = e^{2|x|} >= 3.49.
  const float ax = std::fabs(x);
  const float e = exp_fast(2.f * select_bits(ax > 9.f, 9.f, ax));
  const bool small = ax < 0.625f;
  const float y =
      select_bits(small, p, std::copysign(e - 1.f, x)) / select_bits(small, q, e + 1.f);
  return select_bits(ax < 0.0004f, x, select_bits(ax > 9.f, std::copysign(1.f, x), y));
}

// tanh_fast(x) for |x| < kTanhSmall only (or NaN), bitwise: the rational branch alone, without the
// exponential. A loop whose arguments all lie below kTanhSmall (e.g. attention scores far below a
// soft-cap) may call it instead; tests/tensor compare the two over that range.
inline constexpr float kTanhSmall = 0.625f;
NORMLAB_INLINE float tanh_fast_small(float x) {
  float p, q;
  tanh_rational_terms(x, p, q);
  return select_bits(std::fabs(x) < 0.0004f, x, p / q);
}

// atan2(y, x) for loops that vectorise (libm's atan2f is a call per element): a = min / max of
// |x|, |y| in [0, 1], reduced above tan(pi/8) by atan(a) = pi/4 + atan((a - 1) / (a + 1)), then
// t (1 + z P(z)), z = t^2, with a degree-7 P fitted here by least squares on Chebyshev nodes of
// [0, tan^2(pi/8)] (relative error 6e-8 in float); then the octant. Within 3e-7 relative of
// std::atan2 for finite arguments (tests/tensor/test_vec_math.cpp); atan2(+-0, +-0) as
// std::atan2; NaN in, NaN out. Infinite arguments are not handled (callers' are finite).
NORMLAB_INLINE float atan2_fast(float y, float x) {
  const float ay = std::fabs(y), ax = std::fabs(x);
  const bool steep = ay > ax;
  const float hi = select_bits(steep, ay, ax), lo = select_bits(steep, ax, ay);
  const float a = lo / select_bits(hi > 0.f, hi, 1.f);
  const bool big = a > 0.414213562f;
  const float t = select_bits(big, (a - 1.f) / (a + 1.f), a);
  const float z = t * t;
  float p = -0.03788378f;
  p = p * z + 0.06988718f;
  p = p * z - 0.08996232f;
  p = p * z + 0.1110393f;
  p = p * z - 0.14285419f;
  p = p * z + 0.19999994f;
  p = p * z - 0.33333333f;
  float r = t + t * z * p;
  r = select_bits(big, r + 0.785398163f, r);
  r = select_bits(steep, 1.57079633f - r, r);
  r = select_bits(x < 0.f || (x == 0.f && std::signbit(x)), 3.14159265f - r, r);
  r = std::copysign(r, y);
  return select_bits(x != x || y != y, x + y, r);
}

NORMLAB_INLINE double exp_fast(double x) { return std::exp(x); }
NORMLAB_INLINE double atan2_fast(double y, double x) { return std::atan2(y, x); }
NORMLAB_INLINE double tanh_fast(double x) { return std::tanh(x); }
NORMLAB_INLINE double tanh_fast_small(double x) { return std::tanh(x); }

// erf(x) for loops that vectorise (libm's erff is a call per element; Derf, ops/dyt.h), absolute
// error below 3e-7 everywhere and relative error below 3e-7 for |x| < 1: there the Maclaurin
// series 2/sqrt(pi) sum_n (-1)^n x^(2n+1) / (n! (2n+1)) to n = 10 (truncation below 2e-9); above,
// Abramowitz & Stegun 7.1.26, 1 - t (a1 + t (a2 + ...)) e^(-x^2) with t = 1 / (1 + p |x|)
// (|error| <= 1.5e-7), signed. NaN in, NaN out; erf(+-inf) = +-1.
NORMLAB_INLINE float erf_fast(float x) {
  const float ax = std::fabs(x), x2 = x * x;
  float s = 1.31225329e-8f;  // c_n = (-1)^n / (n! (2n+1)), n = 10 down to 0
  s = s * x2 + -1.45038522e-7f;
  s = s * x2 + 1.45891690e-6f;
  s = s * x2 + -1.32275132e-5f;
  s = s * x2 + 1.06837607e-4f;
  s = s * x2 + -7.57575758e-4f;
  s = s * x2 + 4.62962963e-3f;
  s = s * x2 + -2.38095238e-2f;
  s = s * x2 + 1.0e-1f;
  s = s * x2 + -3.33333333e-1f;
  s = s * x2 + 1.0f;
  const float small = 1.12837916709551257f * x * s;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float q = 1.061405429f;
  q = q * t + -1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t + -0.284496736f;
  q = q * t + 0.254829592f;
  const float large = std::copysign(1.0f - q * t * exp_fast(-x2), x);
  return select_bits(ax < 1.0f, small, large);
}

}  // namespace normlab
