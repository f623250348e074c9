#include "tensor/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "tensor/gemm_loops.h"
#include "tensor/threading.h"

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#define NL_GEMM_AVX2 1  // the 6 x 16 AVX2 kernel below, in place of the 6 x 64 AVX-512 one
#endif
#if defined(__AVX512F__) || defined(NL_GEMM_AVX2)
#include <immintrin.h>
#endif
#if defined(__AVX512F__)
// GCC 12 flags the undefined pass-through operand inside its own AVX-512 intrinsic headers as
// possibly uninitialised (a false positive, GCC bug 105593), not anything in this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace normlab {

namespace {

// ---------------------------------------------------------------------------------------------
// Blocking (Goto & van de Geijn 2008; the loops around the micro-kernel as in BLIS). C is
// computed in MR x NR micro-tiles. op(B) is packed into NR-column panels (NR contiguous values
// per k; a plain copy, or an in-register 16 x 16 transpose when op(B) = B^T); A is read in place
// with its stride (MR rows of it at a time: either MR row streams or MR contiguous values per k),
// which measured as fast as packing it, without the copy. Loops, outermost first: jc over NC
// columns and ks over KS sums, for which op(B) is packed once, by all threads, as KC-slices; then
// tiles (an MC-row block x a range of NR-panels) claimed by the threads; in a tile, pc over the
// KC-slices, jr over B micro-panels (KC x NR, reused from L1/L2 while ir runs over MR-row
// micro-panels of the MC x KC block of A, which stays in L2).
// The blocking constants, Problem and the loops themselves: gemm_loops.h (shared with the bf16
// kernel). op(B) is packed KS sums at a time (at most KS x NC floats of scratch, 8 MiB).
using namespace gemm_detail;
// At most 512 columns of op(B) per block: a packed KC-slice of a block is 512 KiB, a quarter of the
// L2 of a Sapphire Rapids core and half of a Zen 4 core's. With 1024 (until 2026-12-02) the slice,
// the MC x NC block of C and A's block did not fit the L2 together, and the forward products of
// wide layers (1152 and 1536 columns, K = 384) ran 4 to 15% slower on one thread of the Intel
// machine (4-7% in a quiet hour; bench/notes.md, item 9).
constexpr int NC = 512;

thread_local Scratch<float> b_scratch;
// A tile's op(A) = A^T: packed per row block and KC-slice by the AVX2 kernel; copied by the
// AVX-512 one where A's stride conflicts (at_stride_conflicts).
thread_local Scratch<float> a_scratch;

#if !defined(NL_GEMM_AVX2)
// op(A) = A^T is read in place, one row of A (k) after the other, lda floats apart. Where lda is a
// multiple of 16 floats whose 64-byte lines fall into at most 2 of L1's 64 sets (lda = 1536, 3072,
// ...: the lines of a tile's 256 k then evict each other), a tile copies its slice of A^T first
// (MC floats apart: 32 sets). One thread, alternated with reading in place (bench/ab_gemm.sh, 15
// calls, three runs): a's w_in dW (lda 1536) 1.23-1.24x, b's (3072, K = 256) 1.15-1.32x, c's
// float32 one (3072) 1.27x; at lda 384 and 2304 (8 and 4 sets) copying ran 0.85-0.95x in an
// earlier, noisier measurement, so it is not done there.
inline bool at_stride_conflicts(long lda) {
  return lda % 16 == 0 && 64 / std::gcd(lda / 16, 64L) <= 2;
}
#endif

#if defined(__AVX512F__)
// 16 x 16 transpose in registers: rows r[0..15] become columns.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xDD);
  }
}
#endif

#if defined(NL_GEMM_AVX2)
// 8 x 8 transpose in registers: rows r[0..7] become columns.
inline void transpose8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// The AVX2 kernel computes a panel as strips of SW = 16 columns; each strip is packed on its own,
// kc x 16 contiguous (16 KiB at KC = 256, which stays in L1: with a row stride of NR floats the
// strip's lines would fall into a quarter of L1's sets and evict each other).
constexpr int SW = 16;
inline float* b_at(float* bp, int k, int c, int kc) {
  return bp + static_cast<long>(c / SW) * kc * SW + static_cast<long>(k) * SW + c % SW;
}
#else
inline float* b_at(float* bp, int k, int c, int /*kc*/) { return bp + static_cast<long>(k) * NR + c; }
#endif

// Packs NR-column panel (columns [j0, j0 + nr)) over sums [k0, k0 + kc) of op(B):
// bp[k][c] (at b_at), zero past N.
void pack_b_panel(float* bp, bool tb, const float* B, long ldb, int j0, int nr, int k0, int kc) {
#if defined(NL_GEMM_AVX2)
  if (!tb) {  // op(B)(k, j) = B[k][j]: rows are contiguous
    for (int c0 = 0; c0 < NR; c0 += SW) {
      const int cn = std::max(0, std::min(SW, nr - c0));
      for (int k = 0; k < kc; ++k) {
        float* dst = b_at(bp, k, c0, kc);
        if (cn > 0)
          std::memcpy(dst, B + static_cast<long>(k0 + k) * ldb + j0 + c0, sizeof(float) * cn);
        if (cn < SW) std::memset(dst + cn, 0, sizeof(float) * (SW - cn));
      }
    }
    return;
  }
#else
  if (!tb) {  // op(B)(k, j) = B[k][j]: rows are contiguous
    for (int k = 0; k < kc; ++k) {
      const float* src = B + static_cast<long>(k0 + k) * ldb + j0;
      float* dst = bp + static_cast<long>(k) * NR;
      std::memcpy(dst, src, sizeof(float) * nr);
      if (nr < NR) std::memset(dst + nr, 0, sizeof(float) * (NR - nr));
    }
    return;
  }
#endif
  // op(B)(k, j) = B[j][k]: transpose while packing, in 16 x 16 blocks
  for (int c0 = 0; c0 < NR; c0 += 16) {
    const int cn = std::max(0, std::min(16, nr - c0));
    for (int kb = 0; kb < kc; kb += 16) {
      const int kn = std::min(16, kc - kb);
#if defined(NL_GEMM_AVX2)
      if (cn == 16 && kn == 16) {
        for (int cc = 0; cc < 16; cc += 8)
          for (int kk = 0; kk < 16; kk += 8) {
            __m256 r[8];
            for (int c = 0; c < 8; ++c)
              r[c] = _mm256_loadu_ps(B + static_cast<long>(j0 + c0 + cc + c) * ldb + k0 + kb + kk);
            transpose8(r);
            for (int k = 0; k < 8; ++k) _mm256_store_ps(b_at(bp, kb + kk + k, c0 + cc, kc), r[k]);
          }
        continue;
      }
#endif
#if defined(__AVX512F__)
      if (cn == 16 && kn == 16) {
        __m512 r[16];
        for (int c = 0; c < 16; ++c)
          r[c] = _mm512_loadu_ps(B + static_cast<long>(j0 + c0 + c) * ldb + k0 + kb);
        transpose16(r);
        for (int k = 0; k < 16; ++k)
          _mm512_store_ps(bp + static_cast<long>(kb + k) * NR + c0, r[k]);
        continue;
      }
#endif
      for (int k = 0; k < kn; ++k) {
        float* dst = b_at(bp, kb + k, c0, kc);
        for (int c = 0; c < cn; ++c) dst[c] = B[static_cast<long>(j0 + c0 + c) * ldb + k0 + kb + k];
        for (int c = cn; c < 16; ++c) dst[c] = 0.f;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels: C[0:mr, 0:nc] = alpha * sum_k a(k, r) bp[k][0:NR] + beta * C (beta = 0: C is
// not read). A is read where it lies: a(k, r) = ap[k * as + r] (KMajor, op(A) = A^T) or
// ap[r * as + k] (op(A) = A), as = lda; rows r >= mr read row mr - 1 (in bounds, never stored).
// NV is the number of 16-wide vectors of the tile that are needed (nc <= 16 NV).

#if defined(__AVX512F__)
// op(A) = A^T read in place (the weight gradients): the micro-kernel requests the line of A^T it
// will read kPrefetchA sums ahead, one per k; A's rows are lda floats apart, a stride the hardware
// prefetchers do not follow. One thread of the Intel AMX machine (bench/ab_gemm.sh against the
// kernel without it, 9 to 15 alternated calls, results bitwise equal): a's and c's wqkv dW (lda
// 1152) 1.06-1.09x, b's (2304) 1.06-1.08x, b's wo dW (768) 1.05x, b's w_out dW (3072 columns,
// lda 768) 1.03-1.04x, the others 1.00-1.03x; with lda from 4,000 to 32,000 floats 1.04-1.08x, but
// at 50,000 and at b's LM head (50,257) 0.94-0.99x in every run, so it is not done past kMaxLdaPf.
// Distances of 4, 8 and 16 sums measured the same.
constexpr long kPrefetchA = 8;
constexpr long kMaxLdaPf = 32768;

template <int NV, bool KMajor, bool PrefetchA>
void micro_kernel(int kc, const float* __restrict ap, long as, const float* __restrict bp, float* c,
                  long ldc, int mr, int nc, float alpha, float beta) {
  __m512 acc[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const float* arow[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    const int rr = r < mr ? r : mr - 1;
    arow[r] = KMajor ? ap + rr : ap + static_cast<long>(rr) * as;
  }
  const long astep = KMajor ? as : 1;
  // op(A) = A^T (the weight gradients, K = the tokens of a step): C's lines are requested before
  // the products, so that reading C (beta != 0) or writing it does not wait for memory at the end.
  // One thread of the Zen 5 machine (bench/ab_gemm.sh, 11 alternated calls, two runs): b's dW
  // shapes (K = 256) 1.00-1.05x (head 1.02-1.04x, w_out 1.04-1.05x), a's and c's (K = 2048)
  // 0.99-1.02x; for op(A) = A the same prefetch ran 0.97-1.00x, so it is not done there.
  if constexpr (KMajor) {
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      if (r >= mr) break;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) __builtin_prefetch(c + r * ldc + 16 * v, 1, 3);
    }
  }
#pragma GCC unroll 2
  for (int k = 0; k < kc; ++k) {
    if constexpr (PrefetchA)  // an address past A's end is never read: computed as an integer
      __builtin_prefetch(reinterpret_cast<const void*>(
                             reinterpret_cast<std::uintptr_t>(arow[0]) +
                             sizeof(float) * static_cast<std::uintptr_t>((k + kPrefetchA) * astep)),
                         0, 3);
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = _mm512_load_ps(bp + k * NR + 16 * v);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(arow[r][static_cast<long>(k) * astep]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  const int tail = nc - 16 * (NV - 1);  // 1..16 columns in the last vector
  const __mmask16 last = static_cast<__mmask16>(tail >= 16 ? 0xFFFF : (1u << tail) - 1);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    if (r >= mr) break;
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
      __m512 x = _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0.f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, cr + 16 * v), x);
      _mm512_mask_storeu_ps(cr + 16 * v, m, x);
    }
  }
}
#elif defined(NL_GEMM_AVX2)
// Without AVX-512 (AVX2 + FMA: 16 ymm registers) the tile is 6 x 16: 12 ymm accumulators, 2 loads of
// op(B) and 6 broadcasts of A per k. With 4x fewer products per value of A than the 6 x 64 tile,
// A is packed here (pack_a_block), once per row block and KC-slice, and an NR-column panel of op(B)
// is computed as four strips of 16 columns, each kept in L1 while the row micro-panels go by. Every
// element is the same chain of FMAs over k as in the AVX-512 kernel, and C is written as
// alpha * acc (+ beta * C) the same way: both kernels give bitwise the same results.

// Rows [i0, i0 + mcur) x sums [k0, k0 + kc) of op(A) = A^T as MR-row micro-panels, k-major:
// ap[(ir / MR) * kc * MR + k * MR + r]; rows past mcur repeat its last row (computed, never stored).
void pack_a_block(const Problem& p, int i0, int mcur, int k0, int kc, float* ap) {
  for (int ir = 0; ir < mcur; ir += MR) {
    const int mr = std::min(MR, mcur - ir);
    float* dst = ap + static_cast<long>(ir / MR) * kc * MR;
    for (int k = 0; k < kc; ++k) {  // op(A)(i, k) = A[k][i]: MR contiguous values per k
      const float* src = p.A + static_cast<long>(k0 + k) * p.lda + i0 + ir;
      for (int r = 0; r < MR; ++r) dst[k * MR + r] = src[r < mr ? r : mr - 1];
    }
  }
}

// C[0:mr, 0:ncols] = alpha * sum_k a(k, r) bp[k][0:16] + beta * C (a packed strip, b_at), with
// a(k, r) = arow[r][k * astep].
void strip_6x16(int kc, const float* const* arow, long astep, const float* __restrict bp, float* c,
                long ldc, int mr, int ncols, float alpha, float beta) {
  __m256 acc[MR][2];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(bp + k * SW), b1 = _mm256_load_ps(bp + k * SW + 8);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 a = _mm256_broadcast_ss(arow[r] + k * astep);
      acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {  // unrolled, so that acc stays in registers
    if (r >= mr) break;
    float* cr = c + r * ldc;
    if (ncols == SW) {
      __m256 x0 = _mm256_mul_ps(va, acc[r][0]), x1 = _mm256_mul_ps(va, acc[r][1]);
      if (beta != 0.f) {
        x0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), x0);
        x1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), x1);
      }
      _mm256_storeu_ps(cr, x0);
      _mm256_storeu_ps(cr + 8, x1);
    } else {  // the last strip of C's last panel: the same arithmetic, element by element
      alignas(32) float t[SW];
      _mm256_store_ps(t, _mm256_mul_ps(va, acc[r][0]));
      _mm256_store_ps(t + 8, _mm256_mul_ps(va, acc[r][1]));
      for (int j = 0; j < ncols; ++j) cr[j] = beta != 0.f ? std::fma(beta, cr[j], t[j]) : t[j];
    }
  }
}
#else
template <int NV, bool KMajor, bool /*PrefetchA*/>
void micro_kernel(int kc, const float* __restrict ap, long as, const float* __restrict bp, float* c,
                  long ldc, int mr, int nc, float alpha, float beta) {
  constexpr int W = 16 * NV;
  float acc[MR][W] = {};
  for (int k = 0; k < kc; ++k)
    for (int r = 0; r < MR; ++r) {
      const int rr = r < mr ? r : mr - 1;
      const float a =
          KMajor ? ap[static_cast<long>(k) * as + rr] : ap[static_cast<long>(rr) * as + k];
      for (int j = 0; j < W; ++j) acc[r][j] += a * bp[k * NR + j];
    }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nc; ++j) {
      float& cv = c[r * ldc + j];
      cv = beta != 0.f ? alpha * acc[r][j] + beta * cv : alpha * acc[r][j];
    }
}
#endif

#if !defined(NL_GEMM_AVX2)
template <bool KMajor, bool PrefetchA = false>
void micro(int kc, const float* ap, long as, const float* bp, float* c, long ldc, int mr, int nc,
           float alpha, float beta) {
  with_vectors(nc, [&](auto nv) {
    micro_kernel<decltype(nv)::value, KMajor, PrefetchA>(kc, ap, as, bp, c, ldc, mr, nc, alpha,
                                                         beta);
  });
}
#endif

// Packed op(B) of the block being computed: slice after slice of KC sums; slice pc (relative to
// ks) holds npanels panels of kc x NR and starts at pc * npanels * NR.
void sgemm_blocked(const Problem& p, bool allow_parallel) {
  const int kmax = packed_sums(p.K);
  float* bpack = b_scratch.get(static_cast<std::size_t>(kmax) * block_width<NC>(p.N));
  auto pack_b = [&](const Block& blk, int jp, int pc) {
    const int kc = std::min(KC, blk.kend - blk.ks - pc);
    pack_b_panel(bpack + static_cast<long>(pc) * blk.npanels * NR + static_cast<long>(jp) * NR * kc,
                 p.tb, p.B, p.ldb, blk.jc + jp * NR, std::min(NR, blk.nc - jp * NR), blk.ks + pc,
                 kc);
  };
#if defined(NL_GEMM_AVX2)
  auto tile = [&](const Block& blk, int i0, int mcur, int jp0, int jp1) {
    // op(A) = A is read in place (MR row streams); op(A) = A^T is packed (its MR values per k
    // lie in one row of A, a new cache line for every k otherwise).
    float* apack = p.ta ? a_scratch.get(static_cast<std::size_t>((mcur + MR - 1) / MR * MR) * KC)
                        : nullptr;
    for (int pc = blk.ks; pc < blk.kend; pc += KC) {
      const int kc = std::min(KC, blk.kend - pc);
      const float beta = pc == 0 ? p.beta : 1.f;
      const float* bslice = bpack + static_cast<long>(pc - blk.ks) * blk.npanels * NR;
      if (p.ta) pack_a_block(p, i0, mcur, pc, kc, apack);
      for (int jp = jp0; jp < jp1; ++jp) {
        const int j0 = jp * NR, ncur = std::min(NR, blk.nc - j0);
        const float* bp = bslice + static_cast<long>(jp) * NR * kc;
        for (int s0 = 0; s0 < ncur; s0 += SW)
          for (int ir = 0; ir < mcur; ir += MR) {
            const int mr = std::min(MR, mcur - ir);
            const float* arow[MR];
            for (int r = 0; r < MR; ++r)
              arow[r] = p.ta ? apack + static_cast<long>(ir / MR) * kc * MR + r
                             : p.A + static_cast<long>(i0 + ir + std::min(r, mr - 1)) * p.lda + pc;
            float* c = p.C + static_cast<long>(i0 + ir) * p.ldc + blk.jc + j0 + s0;
            strip_6x16(kc, arow, p.ta ? MR : 1, bp + static_cast<long>(s0) * kc, c, p.ldc, mr,
                       std::min(SW, ncur - s0), p.alpha, beta);
          }
      }
    }
  };
#else
  const bool copy_at = p.ta && at_stride_conflicts(p.lda);
  auto tile = [&](const Block& blk, int i0, int mcur, int jp0, int jp1) {
    float* acopy = copy_at ? a_scratch.get(static_cast<std::size_t>(MC) * KC) : nullptr;
    for (int pc = blk.ks; pc < blk.kend; pc += KC) {
      const int kc = std::min(KC, blk.kend - pc);
      const float beta = pc == 0 ? p.beta : 1.f;
      const float* bslice = bpack + static_cast<long>(pc - blk.ks) * blk.npanels * NR;
      if (copy_at)  // the tile's rows of A^T for this slice, MC floats apart
        for (int k = 0; k < kc; ++k)
          std::memcpy(acopy + static_cast<long>(k) * MC,
                      p.A + static_cast<long>(pc + k) * p.lda + i0, sizeof(float) * mcur);
      for (int jp = jp0; jp < jp1; ++jp) {
        const int j0 = jp * NR, ncur = std::min(NR, blk.nc - j0);
        const float* bp = bslice + static_cast<long>(jp) * NR * kc;
        for (int ir = 0; ir < mcur; ir += MR) {
          float* c = p.C + static_cast<long>(i0 + ir) * p.ldc + blk.jc + j0;
          const int mr = std::min(MR, mcur - ir);
          if (p.ta) {
            const float* ap = copy_at ? acopy + ir : p.A + static_cast<long>(pc) * p.lda + i0 + ir;
            const long as = copy_at ? MC : p.lda;
            if (as <= kMaxLdaPf)
              micro<true, true>(kc, ap, as, bp, c, p.ldc, mr, ncur, p.alpha, beta);
            else
              micro<true>(kc, ap, as, bp, c, p.ldc, mr, ncur, p.alpha, beta);
          } else {
            const float* ap = p.A + static_cast<long>(i0 + ir) * p.lda + pc;
            micro<false>(kc, ap, p.lda, bp, c, p.ldc, mr, ncur, p.alpha, beta);
          }
        }
      }
    }
  };
#endif
  blocked_loops<NC>(p, allow_parallel, pack_b, tile);
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  sgemm_blocked({ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc}, true);
#else
  if (in_parallel()) {
    sgemm_blocked({ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc}, false);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

template <>
void gemm_serial<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                        const float* B, int ldb, float beta, float* C, int ldc) {
  sgemm_blocked({ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc}, false);
}

// double is for gradient checks at tiny sizes: the reference loop (accumulating in double) is
// exact enough and safe inside parallel regions.
template <>
void gemm_serial<double>(bool ta, bool tb, int M, int N, int K, double alpha, const double* A,
                         int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  gemm_ref<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <>
void gemm<double>(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (in_parallel()) {
    gemm_serial<double>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace normlab
