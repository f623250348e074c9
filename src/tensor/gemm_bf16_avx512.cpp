// The bf16 GEMM's blocked kernel over k-pair words (gemm_bf16.h's avx512bf16 and portable
// kernels): op(B) packed into NR-column panels and blocks of op(A) into rows, as 32-bit words that
// each hold a pair of bf16 sums, multiplied by 6 x 64 micro-kernels: AVX512-BF16's vdpbf16ps, or
// the portable one, its model in scalar code, which reads the same words through the same loops.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tensor/bf16.h"
#include "tensor/gemm_bf16_detail.h"

namespace normlab::gemm_bf16_detail {

namespace {

// At most 1024 columns of op(B) per block for the AVX512-BF16 kernel (a packed KC-slice: 512 KiB);
// the AMX kernel's are in gemm_bf16_amx.cpp (NC_AMX).
constexpr int NC = 1024;

thread_local Scratch<u32> a_scratch;  // one packed MC x KC block of op(A) per thread (48 KiB)

// Packs NR-column panel (columns [j0, j0 + nr)) over sums [k0, k0 + kc) of op(B):
// bp[kp][c] = pair(k0 + 2 kp, k0 + 2 kp + 1) of column j0 + c; zero past N and past the sums.
void pack_b_panel(u32* __restrict bp, bool tb, const float* B, long ldb, int j0, int nr, int k0,
                  int kc) {
  const int kpairs = (kc + 1) / 2;
  if (!tb) {  // op(B)(k, j) = B[k][j]: two rows give a row of words
    for (int kp = 0; kp < kpairs; ++kp) {
      const float* r0 = B + static_cast<long>(k0 + 2 * kp) * ldb + j0;
      u32* dst = bp + static_cast<long>(kp) * NR;
      if (2 * kp + 1 < kc) {
        const float* r1 = r0 + ldb;
        for (int c = 0; c < nr; ++c) dst[c] = bf16_word(r0[c]) | (bf16_word(r1[c]) << 16);
      } else {
        for (int c = 0; c < nr; ++c) dst[c] = bf16_word(r0[c]);
      }
      for (int c = nr; c < NR; ++c) dst[c] = 0;
    }
    return;
  }
  // op(B)(k, j) = B[j][k]: the pairs of a column are adjacent in memory; a word per (kp, column)
  const int kfull = kc / 2;
  for (int c = 0; c < nr; ++c) {
    const float* col = B + static_cast<long>(j0 + c) * ldb + k0;
    u32* dst = bp + c;
    for (int kp = 0; kp < kfull; ++kp)
      dst[static_cast<long>(kp) * NR] = bf16_word(col[2 * kp]) | (bf16_word(col[2 * kp + 1]) << 16);
    if (kc % 2) dst[static_cast<long>(kfull) * NR] = bf16_word(col[kc - 1]);
  }
  if (nr < NR)
    for (int kp = 0; kp < kpairs; ++kp)
      std::memset(bp + static_cast<long>(kp) * NR + nr, 0, sizeof(u32) * (NR - nr));
}

// Packs rows [i0, i0 + mc) x sums [k0, k0 + kc) of op(A). Two layouts, both read by the
// micro-kernel as a(kp, r) = row[r][kp * step]:
//   !ta (op(A) = A, rows contiguous in k): ap[i][kp], row stride (kc + 1) / 2, step 1;
//   ta  (op(A) = A^T, columns contiguous in i): ap[kp][i], step mc ("KMajor").
void pack_a_block(u32* __restrict ap, bool ta, const float* A, long lda, int i0, int mc, int k0,
                  int kc) {
  const int kpairs = (kc + 1) / 2, kfull = kc / 2;
  if (!ta) {
    for (int i = 0; i < mc; ++i) {
      const float* row = A + static_cast<long>(i0 + i) * lda + k0;
      u32* dst = ap + static_cast<long>(i) * kpairs;
      for (int kp = 0; kp < kfull; ++kp)
        dst[kp] = bf16_word(row[2 * kp]) | (bf16_word(row[2 * kp + 1]) << 16);
      if (kc % 2) dst[kfull] = bf16_word(row[kc - 1]);
    }
    return;
  }
  for (int kp = 0; kp < kpairs; ++kp) {
    const float* r0 = A + static_cast<long>(k0 + 2 * kp) * lda + i0;
    u32* dst = ap + static_cast<long>(kp) * mc;
    if (2 * kp + 1 < kc) {
      const float* r1 = r0 + lda;
      for (int i = 0; i < mc; ++i) dst[i] = bf16_word(r0[i]) | (bf16_word(r1[i]) << 16);
    } else {
      for (int i = 0; i < mc; ++i) dst[i] = bf16_word(r0[i]);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels: C[0:mr, 0:nc] = alpha * sum_kp a(kp, r) . bp[kp][0:NR] + beta * C (beta = 0: C
// is not read), where "." is the two-product dot of the bf16 pairs, in fp32. a(kp, r) =
// ap[kp * as + r] (KMajor) or ap[r * as + kp]; rows r >= mr read row mr - 1 (never stored).

#if defined(NL_BF16_X86)
template <int NV, bool KMajor>
NL_TARGET_BF16 void micro_kernel_avx512(int kpn, const u32* __restrict ap, long as,
                                        const u32* __restrict bp, float* c, long ldc, int mr,
                                        int nc, float alpha, float beta) {
  __m512 acc[MR][NV];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const u32* arow[MR];
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    const int rr = r < mr ? r : mr - 1;
    arow[r] = KMajor ? ap + rr : ap + static_cast<long>(rr) * as;
  }
  const long astep = KMajor ? as : 1;
#pragma GCC unroll 2
  for (int kp = 0; kp < kpn; ++kp) {
    __m512i b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = _mm512_load_si512(bp + kp * NR + 16 * v);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int>(arow[r][static_cast<long>(kp) * astep]));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v)
        acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)a, (__m512bh)b[v]);
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

template <bool KMajor>
void micro_avx512(int kpn, const u32* ap, long as, const u32* bp, float* c, long ldc, int mr,
                  int nc, float alpha, float beta) {
  with_vectors(nc, [&](auto nv) {
    micro_kernel_avx512<decltype(nv)::value, KMajor>(kpn, ap, as, bp, c, ldc, mr, nc, alpha, beta);
  });
}
#endif

// Portable: the same packed words, products of the bf16 halves (exact in fp32) added in fp32,
// the low half first.
template <bool KMajor>
void micro_portable(int kpn, const u32* ap, long as, const u32* bp, float* c, long ldc, int mr,
                    int nc, float alpha, float beta) {
  float acc[MR][NR] = {};
  for (int kp = 0; kp < kpn; ++kp)
    for (int r = 0; r < mr; ++r) {
      const u32 a =
          KMajor ? ap[static_cast<long>(kp) * as + r] : ap[static_cast<long>(r) * as + kp];
      const float a0 = bf16_to_float(static_cast<std::uint16_t>(a & 0xFFFFu));
      const float a1 = bf16_to_float(static_cast<std::uint16_t>(a >> 16));
      const u32* b = bp + static_cast<long>(kp) * NR;
      for (int j = 0; j < nc; ++j) {
        const float b0 = bf16_to_float(static_cast<std::uint16_t>(b[j] & 0xFFFFu));
        const float b1 = bf16_to_float(static_cast<std::uint16_t>(b[j] >> 16));
        acc[r][j] += a0 * b0;
        acc[r][j] += a1 * b1;
      }
    }
  for (int r = 0; r < mr; ++r)
    for (int j = 0; j < nc; ++j) {
      float& cv = c[r * ldc + j];
      cv = beta != 0.f ? alpha * acc[r][j] + beta * cv : alpha * acc[r][j];
    }
}

}  // namespace

// As sgemm_blocked (gemm.cpp), with A packed per tile and KC-slice as well. Packed op(B): slice
// pc (relative to ks) holds npanels panels of (kc + 1) / 2 x NR words and starts at
// pc / 2 * npanels * NR.
void gemm_bf16_blocked(const Problem& p, bool allow_parallel, bool hardware) {
  const int kmax = packed_sums(p.K);
  u32* bpack = b_scratch.get(static_cast<std::size_t>(kmax / 2) * block_width<NC>(p.N));
  auto pack_b = [&](const Block& blk, int jp, int pc) {
    const int kc = std::min(KC, blk.kend - blk.ks - pc);
    pack_b_panel(bpack + static_cast<long>(pc / 2) * blk.npanels * NR +
                     static_cast<long>(jp) * NR * ((kc + 1) / 2),
                 p.tb, p.B, p.ldb, blk.jc + jp * NR, std::min(NR, blk.nc - jp * NR), blk.ks + pc,
                 kc);
  };
  auto tile = [&](const Block& blk, int i0, int mcur, int jp0, int jp1) {
    u32* apack = a_scratch.get(static_cast<std::size_t>(MC) * (KC / 2));
    for (int pc = blk.ks; pc < blk.kend; pc += KC) {
      const int kc = std::min(KC, blk.kend - pc), kpn = (kc + 1) / 2;
      const float beta = pc == 0 ? p.beta : 1.f;
      pack_a_block(apack, p.ta, p.A, p.lda, i0, mcur, pc, kc);
      const u32* bslice = bpack + static_cast<long>((pc - blk.ks) / 2) * blk.npanels * NR;
      for (int jp = jp0; jp < jp1; ++jp) {
        const int j0 = jp * NR, ncur = std::min(NR, blk.nc - j0);
        const u32* bp = bslice + static_cast<long>(jp) * NR * kpn;
        for (int ir = 0; ir < mcur; ir += MR) {
          float* c = p.C + static_cast<long>(i0 + ir) * p.ldc + blk.jc + j0;
          const int mr = std::min(MR, mcur - ir);
          // KMajor (ta): ap[kp][i], stride mcur; else ap[i][kp], stride kpn.
          const u32* ap = p.ta ? apack + ir : apack + static_cast<long>(ir) * kpn;
          const long as = p.ta ? mcur : kpn;
#if defined(NL_BF16_X86)
          if (hardware) {
            if (p.ta)
              micro_avx512<true>(kpn, ap, as, bp, c, p.ldc, mr, ncur, p.alpha, beta);
            else
              micro_avx512<false>(kpn, ap, as, bp, c, p.ldc, mr, ncur, p.alpha, beta);
            continue;
          }
#endif
          if (p.ta)
            micro_portable<true>(kpn, ap, as, bp, c, p.ldc, mr, ncur, p.alpha, beta);
          else
            micro_portable<false>(kpn, ap, as, bp, c, p.ldc, mr, ncur, p.alpha, beta);
        }
      }
    }
  };
  blocked_loops<NC>(p, allow_parallel, pack_b, tile);
}

}  // namespace normlab::gemm_bf16_detail
