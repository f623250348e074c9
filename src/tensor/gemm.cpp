#include "tensor/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tensor/threading.h"

#if defined(__AVX512F__)
#include <immintrin.h>
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
constexpr int MR = 6, NR = 64;
constexpr int KC = 256, MC = 96, NC = 1024;
// op(B) is packed KS sums at a time (at most KS x NC floats of scratch, 16 MiB).
constexpr int KS = 16 * KC;
static_assert(MC % MR == 0 && NC % NR == 0);

// Scratch that grows and is then reused: nothing is allocated in steady state.
struct Scratch {
  float* p = nullptr;
  std::size_t n = 0;
  float* get(std::size_t need) {
    if (need > n) {
      std::free(p);
      n = (need + 1023) / 1024 * 1024;
      p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};
thread_local Scratch b_scratch;

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

// Packs NR-column panel (columns [j0, j0 + nr)) over sums [k0, k0 + kc) of op(B):
// bp[k][c], zero past N.
void pack_b_panel(float* bp, bool tb, const float* B, long ldb, int j0, int nr, int k0, int kc) {
  if (!tb) {  // op(B)(k, j) = B[k][j]: rows are contiguous
    for (int k = 0; k < kc; ++k) {
      const float* src = B + static_cast<long>(k0 + k) * ldb + j0;
      float* dst = bp + static_cast<long>(k) * NR;
      std::memcpy(dst, src, sizeof(float) * nr);
      if (nr < NR) std::memset(dst + nr, 0, sizeof(float) * (NR - nr));
    }
    return;
  }
  // op(B)(k, j) = B[j][k]: transpose while packing, in 16 x 16 blocks
  for (int c0 = 0; c0 < NR; c0 += 16) {
    const int cn = std::max(0, std::min(16, nr - c0));
    for (int kb = 0; kb < kc; kb += 16) {
      const int kn = std::min(16, kc - kb);
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
        float* dst = bp + static_cast<long>(kb + k) * NR + c0;
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
template <int NV, bool KMajor>
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
#pragma GCC unroll 2
  for (int k = 0; k < kc; ++k) {
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
#else
template <int NV, bool KMajor>
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

template <bool KMajor>
void micro(int kc, const float* ap, long as, const float* bp, float* c, long ldc, int mr, int nc,
           float alpha, float beta) {
  switch ((nc + 15) / 16) {
    case 1:
      micro_kernel<1, KMajor>(kc, ap, as, bp, c, ldc, mr, nc, alpha, beta);
      break;
    case 2:
      micro_kernel<2, KMajor>(kc, ap, as, bp, c, ldc, mr, nc, alpha, beta);
      break;
    case 3:
      micro_kernel<3, KMajor>(kc, ap, as, bp, c, ldc, mr, nc, alpha, beta);
      break;
    default:
      micro_kernel<4, KMajor>(kc, ap, as, bp, c, ldc, mr, nc, alpha, beta);
      break;
  }
}

struct Problem {
  bool ta, tb;
  int M, N, K;
  float alpha;
  const float* A;
  long lda;
  const float* B;
  long ldb;
  float beta;
  float* C;
  long ldc;
};

void scale_c(const Problem& p) {
  for (int i = 0; i < p.M; ++i) {
    float* c = p.C + i * p.ldc;
    if (p.beta == 0.f)
      std::memset(c, 0, sizeof(float) * p.N);
    else
      for (int j = 0; j < p.N; ++j) c[j] *= p.beta;
  }
}

// Blocks of NC columns x KS sums one after the other; for each, op(B) is packed first, then the
// tiles are claimed by the threads from a shared counter (parallel_for), so that a thread the OS
// has put aside does not hold the others back. A tile is computed by one thread from its first
// sum to its last, in a fixed order: results do not depend on the number of threads.
void sgemm_blocked(const Problem& p, bool allow_parallel) {
  if (p.M <= 0 || p.N <= 0) return;
  if (p.K <= 0) {
    scale_c(p);
    return;
  }
  const double flops = 2.0 * p.M * p.N * p.K;
  const bool par = allow_parallel && !in_parallel() && thread_count() > 1 && flops > 4e6;
  const int nth = par ? thread_count() : 1;
  const int kmax = std::min(KS, (p.K + KC - 1) / KC * KC);
  float* bpack =
      b_scratch.get(static_cast<std::size_t>(kmax) * std::min(NC, (p.N + NR - 1) / NR * NR));
  const int mblocks_max = (p.M + MC - 1) / MC;
  for (int jc = 0; jc < p.N; jc += NC)
    for (int ks = 0; ks < p.K; ks += KS) {
      const int nc = std::min(NC, p.N - jc);
      const int npanels = (nc + NR - 1) / NR;
      const int kend = std::min(p.K, ks + KS);
      const long kslices = (kend - ks + KC - 1) / KC;
      // Packed B, slice after slice of KC sums: slice pc (relative to ks) holds npanels panels of
      // kc x NR and starts at pc * npanels * NR.
      auto pack = [&](long w) {
        const int jp = static_cast<int>(w % npanels), pc = static_cast<int>(w / npanels) * KC;
        const int kc = std::min(KC, kend - ks - pc);
        pack_b_panel(bpack + static_cast<long>(pc) * npanels * NR + static_cast<long>(jp) * NR * kc,
                     p.tb, p.B, p.ldb, jc + jp * NR, std::min(NR, nc - jp * NR), ks + pc, kc);
      };
      const long nwork = npanels * kslices;
      if (par && static_cast<long>(nc) * (kend - ks) >= (1L << 17))
        parallel_for(nwork, 1, [&](long b, long e) {
          for (long w = b; w < e; ++w) pack(w);
        });
      else
        for (long w = 0; w < nwork; ++w) pack(w);

      // Tiles: enough of them to keep every thread busy; few row blocks are shrunk (whole
      // micro-panels) before the columns are split.
      int mc = MC;
      if (nth > 1 && mblocks_max < 2 * nth)
        mc = std::max(MR, ((p.M + 2 * nth - 1) / (2 * nth) + MR - 1) / MR * MR);
      const int mblocks = (p.M + mc - 1) / mc;
      int nsplit = 1;
      while (nth > 1 && mblocks * nsplit < 4 * nth && nsplit * 2 <= npanels) ++nsplit;
      const long ntiles = static_cast<long>(mblocks) * nsplit;
      auto tile = [&](long t) {
        const int mb = static_cast<int>(t / nsplit), ns = static_cast<int>(t % nsplit);
        const int i0 = mb * mc, mcur = std::min(mc, p.M - i0);
        const int jp0 = npanels * ns / nsplit, jp1 = npanels * (ns + 1) / nsplit;
        for (int pc = ks; pc < kend; pc += KC) {
          const int kc = std::min(KC, kend - pc);
          const float beta = pc == 0 ? p.beta : 1.f;
          const float* bslice = bpack + static_cast<long>(pc - ks) * npanels * NR;
          for (int jp = jp0; jp < jp1; ++jp) {
            const int j0 = jp * NR, ncur = std::min(NR, nc - j0);
            const float* bp = bslice + static_cast<long>(jp) * NR * kc;
            for (int ir = 0; ir < mcur; ir += MR) {
              float* c = p.C + static_cast<long>(i0 + ir) * p.ldc + jc + j0;
              const int mr = std::min(MR, mcur - ir);
              if (p.ta) {
                const float* ap = p.A + static_cast<long>(pc) * p.lda + i0 + ir;
                micro<true>(kc, ap, p.lda, bp, c, p.ldc, mr, ncur, p.alpha, beta);
              } else {
                const float* ap = p.A + static_cast<long>(i0 + ir) * p.lda + pc;
                micro<false>(kc, ap, p.lda, bp, c, p.ldc, mr, ncur, p.alpha, beta);
              }
            }
          }
        }
      };
      if (par)
        parallel_for(ntiles, 1, [&](long b, long e) {
          for (long t = b; t < e; ++t) tile(t);
        });
      else
        for (long t = 0; t < ntiles; ++t) tile(t);
    }
}

}  // namespace

template <>
void gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
#if defined(__AVX512F__)
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
