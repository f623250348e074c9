// The bf16 GEMM on Intel AMX tiles (gemm_bf16.h's amx kernel), where Linux grants the process
// the tile registers (gemm_bf16.cpp asks).
//
// AMX. Eight tile registers of 16 rows x 64 bytes: 0-3 hold a 32 x 32 block of C as 2 x 2 tiles
// of 16 x 16 fp32 sums, 4-5 two 16-row tiles of op(A) (16 rows x 16 k-pairs), 6-7 two 16-column
// tiles of op(B) (16 k-pairs x 16 columns). tdpbf16ps adds, for each C element, the two products
// of each of the 16 word pairs in turn, in fp32. The words are those of the AVX512-BF16 kernel (a
// k-pair of bf16 values in one 32-bit word), in tile-major layouts (below), padded with zero
// words to a multiple of 16 k-pairs per KC-slice, and A with zero rows to a multiple of 16 (their
// sums are never stored). Unlike the 6 x 64 kernel, a 32 x 32 block is summed over all the KS
// sums of a block in the tiles and added to C once.
//
// Packing rounds with vcvtne2ps2bf16 (round to nearest even, like bf16_word, but fp32 subnormals
// become zero: tdpbf16ps would treat them as zero anyway) and moves 16 x 16 blocks of words
// through registers; edges fall back to bf16_word.
#include <algorithm>
#include <cstdint>

#include "tensor/bf16.h"
#include "tensor/gemm_bf16_detail.h"

#if defined(NL_AMX)
namespace normlab::gemm_bf16_detail {

namespace {

constexpr int AMX_KQ = 16;  // k-pairs per tile
inline int amx_kpairs(int kc) { return ((kc + 1) / 2 + AMX_KQ - 1) / AMX_KQ * AMX_KQ; }
inline int amx_rows(int mc) { return (mc + 15) / 16 * 16; }

struct alignas(64) TileConfig {
  std::uint8_t palette, start_row, reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

// Every tile 16 rows x 64 bytes. The configuration lies in static memory, filled at compile time:
// GCC 12 does not see that ldtilecfg reads its operand and dropped the stores that filled a local
// one (only the palette byte survived, and the first tile instruction raised SIGILL).
constexpr TileConfig amx_tile_config() {
  TileConfig cfg{};
  cfg.palette = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  return cfg;
}
alignas(64) constexpr TileConfig kAmxTileConfig = amx_tile_config();

NL_TARGET_AMX void amx_configure() {
  asm volatile("" ::: "memory");
  _tile_loadconfig(&kAmxTileConfig);
}

// 16 words bf16(x[0..1]), bf16(x[2..3]), ...: 32 consecutive floats in order.
NL_TARGET_AMX inline __m512i words_of_row(const float* x) {
  return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 16), _mm512_loadu_ps(x));
}
// 16 words bf16(lo[c]) | bf16(hi[c]) << 16: two rows of 16 floats, interleaved.
NL_TARGET_AMX inline __m512i words_of_pair(const float* lo, const float* hi) {
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(hi), _mm512_loadu_ps(lo));
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, both);
}
// r[i][j] -> r[j][i], 16 x 16 words: 32-bit then 64-bit interleaves within 128-bit lanes, then a
// 4 x 4 transpose of the lanes.
NL_TARGET_AMX inline void transpose16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int p = 0; p < 8; ++p) {
    a[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
    a[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // b[4q + c], lane L: column 4L + c of rows 4q..4q+3
    b[4 * q + 0] = _mm512_unpacklo_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 1] = _mm512_unpackhi_epi64(a[4 * q], a[4 * q + 2]);
    b[4 * q + 2] = _mm512_unpacklo_epi64(a[4 * q + 1], a[4 * q + 3]);
    b[4 * q + 3] = _mm512_unpackhi_epi64(a[4 * q + 1], a[4 * q + 3]);
  }
  for (int c = 0; c < 4; ++c) {  // row 4L + c = lane L of b[c], b[4 + c], b[8 + c], b[12 + c]
    const __m512i y0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
    const __m512i y1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i y2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i y3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(y0, y2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(y0, y2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(y1, y3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(y1, y3, 0xDD);
  }
}

// The word of op(X) at (row r, k-pair kp) over sums [k0, k0 + kc): X row-major with leading
// dimension ld, op(X)(r, k) = X[r][k] (!t) or X[k][r] (t); the pair's missing half is 0.
inline u32 word_at(bool t, const float* X, long ld, int r, int k0, int kc, int kp) {
  const int k = k0 + 2 * kp;
  auto at = [&](int kk) {
    return t ? X[static_cast<long>(kk) * ld + r] : X[static_cast<long>(r) * ld + kk];
  };
  return 2 * kp + 1 < kc ? bf16_word(at(k)) | (bf16_word(at(k + 1)) << 16) : bf16_word(at(k));
}

// Tile-major layouts: every tile that tileloadd reads is 1 KiB of consecutive words (16 rows of
// 64 bytes), which the hardware prefetchers follow; a row stride of a whole panel or block would
// put each tile row in another page region.
//   A: 16-row groups, each a run of 16 x 16 tiles along the k-pairs: word (i, kp) at
//      (i / 16) 16 as + (kp / 16) 256 + (i % 16) 16 + kp % 16, as = the k-pairs of a row;
//   B: a panel of NR columns as NR / 16 strips, each a run of kpa rows of 16 words: word (kp, c)
//      at (c / 16) 16 kpa + 16 kp + c % 16.
inline long amx_a_index(int i, int kp, long as) {
  return (i >> 4) * 16 * as + (kp >> 4) * 256 + (i & 15) * 16 + (kp & 15);
}
inline long amx_b_index(int kp, int c, int kpa) {
  return (c >> 4) * 16L * kpa + 16L * kp + (c & 15);
}

// Rows [i0, i0 + mc) x sums [k0, k0 + kc) of op(A) at k-pairs [kp0, kp0 + amx_kpairs(kc)) of
// the A layout above (zero past the sums); rows [mc, amx_rows(mc)) zero.
NL_TARGET_AMX void pack_a_amx(u32* __restrict ap, long as, int kp0, bool ta, const float* A,
                              long lda, int i0, int mc, int k0, int kc) {
  const int kpa = amx_kpairs(kc), kpn = (kc + 1) / 2;
  const int kp16 = kc / 32 * 16, mc16 = mc / 16 * 16;  // the parts moved 16 x 16 at a time
  if (!ta) {
    for (int i = 0; i < mc; ++i) {
      const float* row = A + static_cast<long>(i0 + i) * lda + k0;
      for (int kp = 0; kp < kp16; kp += 16)
        _mm512_storeu_si512(ap + amx_a_index(i, kp0 + kp, as), words_of_row(row + 2 * kp));
    }
  } else {
    // k-pairs outer: the tile's columns of each row of A (4 mc bytes) are read as one run. With
    // the columns outer, each 16 x 16 step read a single 64-byte line from each of 32 rows lda
    // floats apart, one row after the other. c's bf16 dW products, one thread, the two orders
    // alternated (bench/ab_gemm.sh): 1.18x where A has 384 columns (wo), 1.01x at 3072 (w_in),
    // but 0.93-0.96x at 1152 (wqkv), in every run; not understood.
    __m512i w[16];
    for (int kp = 0; kp < kp16; kp += 16)
      for (int i = 0; i < mc16; i += 16) {
        for (int q = 0; q < 16; ++q) {  // w[q][c] = word (row i + c, k-pair kp + q)
          const float* r0 = A + static_cast<long>(k0 + 2 * (kp + q)) * lda + i0 + i;
          w[q] = words_of_pair(r0, r0 + lda);
        }
        transpose16(w);  // w[c]: row i + c, k-pairs kp..kp+15: one row of a tile
        u32* dst = ap + amx_a_index(i, kp0 + kp, as);
        for (int c = 0; c < 16; ++c) _mm512_storeu_si512(dst + 16 * c, w[c]);
      }
  }
  for (int i = 0; i < amx_rows(mc); ++i) {
    const int from = (i >= mc || (ta && i >= mc16)) ? 0 : kp16;  // past the vector part
    for (int kp = from; kp < kpa; ++kp)
      ap[amx_a_index(i, kp0 + kp, as)] =
          i < mc && kp < kpn ? word_at(ta, A, lda, i0 + i, k0, kc, kp) : 0u;
  }
}

// Columns [j0, j0 + nr) x sums [k0, k0 + kc) of op(B) as a panel in the B layout above,
// kpa = amx_kpairs(kc) rows; zero past N and past the sums.
NL_TARGET_AMX void pack_b_amx(u32* __restrict bp, bool tb, const float* B, long ldb, int j0, int nr,
                              int k0, int kc) {
  const int kpa = amx_kpairs(kc), kpn = (kc + 1) / 2, kfull = kc / 2;
  const int nr16 = nr / 16 * 16;
  int kp_done = 0;  // rows [0, kp_done) hold columns [0, nr16)
  if (!tb) {
    for (int kp = 0; kp < kfull; ++kp) {
      const float* r0 = B + static_cast<long>(k0 + 2 * kp) * ldb + j0;
      for (int c = 0; c < nr16; c += 16)
        _mm512_storeu_si512(bp + amx_b_index(kp, c, kpa), words_of_pair(r0 + c, r0 + c + ldb));
    }
    kp_done = kfull;
  } else {
    const int kp16 = kc / 32 * 16;
    __m512i w[16];
    for (int c = 0; c < nr16; c += 16)
      for (int kp = 0; kp < kp16; kp += 16) {
        for (int q = 0; q < 16; ++q)  // w[q][t] = word (k-pair kp + t, column c + q)
          w[q] = words_of_row(B + static_cast<long>(j0 + c + q) * ldb + k0 + 2 * kp);
        transpose16(w);  // w[t]: k-pair kp + t, columns c..c+15
        u32* dst = bp + amx_b_index(kp, c, kpa);
        for (int t = 0; t < 16; ++t) _mm512_storeu_si512(dst + 16 * t, w[t]);
      }
    kp_done = kp16;
  }
  for (int kp = 0; kp < kpa; ++kp)
    for (int c = kp < kp_done ? nr16 : 0; c < NR; ++c)
      bp[amx_b_index(kp, c, kpa)] =
          kp < kpn && c < nr ? word_at(!tb, B, ldb, j0 + c, k0, kc, kp) : 0u;
}

// One KC-slice of a block as the 32 x 32 kernel sees it: its packed B panel, its k-pairs (a
// multiple of 16) and where they start in a packed row of A.
struct AmxSlice {
  const u32* b;
  int kpa, a_off;
};

// C block (32 x 32, tiles 0-3) = sums over the slices of RA 16-row tiles of A times RB 16-column
// tiles of B, then out(32 x 32, row stride 32) = the sums; ap: the block's first 16-row group of
// the A layout (as k-pairs a row); jg: the block's first column in the panels (a multiple of 32).
template <int RA, int RB>
NL_TARGET_AMX void amx_block(int nslices, const AmxSlice* sl, const u32* ap, long as, int jg,
                             float* out, long ldo) {
  _tile_zero(0);
  if constexpr (RB > 1) _tile_zero(1);
  if constexpr (RA > 1) _tile_zero(2);
  if constexpr (RA > 1 && RB > 1) _tile_zero(3);
  for (int s = 0; s < nslices; ++s) {
    const u32* a0 = ap + static_cast<long>(sl[s].a_off) * 16;
    const u32* a1 = a0 + 16 * as;
    const u32* b0 = sl[s].b + amx_b_index(0, jg, sl[s].kpa);
    const u32* b1 = sl[s].b + amx_b_index(0, jg + 16, sl[s].kpa);
    for (int q = 0; q < sl[s].kpa; q += AMX_KQ) {
      const long t = static_cast<long>(q) * 16;  // words into a run of tiles
      _tile_loadd(4, a0 + t, 64);
      _tile_loadd(6, b0 + t, 64);
      if constexpr (RB > 1) _tile_loadd(7, b1 + t, 64);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (RB > 1) _tile_dpbf16ps(1, 4, 7);
      if constexpr (RA > 1) {
        _tile_loadd(5, a1 + t, 64);
        _tile_dpbf16ps(2, 5, 6);
        if constexpr (RB > 1) _tile_dpbf16ps(3, 5, 7);
      }
    }
  }
  _tile_stored(0, out, ldo * 4);
  if constexpr (RB > 1) _tile_stored(1, out + 16, ldo * 4);
  if constexpr (RA > 1) _tile_stored(2, out + 16 * ldo, ldo * 4);
  if constexpr (RA > 1 && RB > 1) _tile_stored(3, out + 16 * ldo + 16, ldo * 4);
}

// C[0:mr, 0:nc] = alpha out + beta C (beta = 0: C is not read); mr, nc <= 32. With alpha = 1
// the product is skipped (1 x is x, bitwise).
NL_TARGET_AMX void amx_store(const float* out, float* c, long ldc, int mr, int nc, float alpha,
                             float beta) {
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (int r = 0; r < mr; ++r)
    for (int v = 0; v < 2 && 16 * v < nc; ++v) {
      const int n = std::min(16, nc - 16 * v);
      const __mmask16 m = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1);
      float* cr = c + r * ldc + 16 * v;
      __m512 x = _mm512_loadu_ps(out + 32 * r + 16 * v);
      if (alpha != 1.f) x = _mm512_mul_ps(va, x);
      if (beta != 0.f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, cr), x);
      _mm512_mask_storeu_ps(cr, m, x);
    }
}

// At most 2048 columns of op(B) per block for the AMX kernel. A tile packs its rows of op(A) once
// per block, from float32 in memory, and that read is not overlapped with the tile products: with
// fewer blocks A is read fewer times. One thread, alternated with 1024-column blocks (the width
// before 2026-12-02) in one process, best of 12, three runs: 2048 x 1152 x 384 (one block instead
// of 1024 + 128) 1.25-1.34x, 2048 x 1536 x 384 1.08-1.17x, 2048 x 3072 x 384 (2 x 1536 instead of
// 3 x 1024) 0.98-1.07x, b's 256-row forward shapes unchanged; in a quieter hour (bench/ab_gemm.sh)
// 1.10x, 1.04x and 0.94x. Wider blocks did not pay: 3072 columns in one block ran 0.70-0.85x.
constexpr int NC_AMX = 2048;

thread_local Scratch<u32> amx_a_scratch;  // op(A) of one tile over a block's sums: 96 x 2048 words

}  // namespace

// The loops of gemm_loops.h (so results do not depend on the thread count), with the AMX layouts:
// a tile packs its rows of op(A) over all the block's sums, then computes its 32 x 32 blocks one
// by one over all of them.
void gemm_bf16_amx(const Problem& p, bool allow_parallel) {
  const int kmax = packed_sums(p.K);
  u32* bpack = b_scratch.get(static_cast<std::size_t>(kmax / 2) * block_width<NC_AMX>(p.N));
  // Slice pc (relative to ks): npanels panels of amx_kpairs(kc) x NR words, from pc / 2 * npanels
  // * NR (a full slice has KC / 2 k-pairs, a multiple of 16).
  auto panel = [&](const Block& blk, int jp, int pc) {
    const int kc = std::min(KC, blk.kend - blk.ks - pc);
    return bpack + static_cast<long>(pc / 2) * blk.npanels * NR +
           static_cast<long>(jp) * NR * amx_kpairs(kc);
  };
  auto pack_b = [&](const Block& blk, int jp, int pc) {
    const int kc = std::min(KC, blk.kend - blk.ks - pc);
    pack_b_amx(panel(blk, jp, pc), p.tb, p.B, p.ldb, blk.jc + jp * NR,
               std::min(NR, blk.nc - jp * NR), blk.ks + pc, kc);
  };
  auto tile = [&](const Block& blk, int i0, int mcur, int jp0, int jp1) {
    amx_configure();
    AmxSlice sl[KS / KC];
    int nslices = 0, as = 0;  // as: k-pairs of a packed row of A, over all slices
    for (int pc = 0; pc < blk.kend - blk.ks; pc += KC) {
      sl[nslices++] = {nullptr, amx_kpairs(std::min(KC, blk.kend - blk.ks - pc)), as};
      as += sl[nslices - 1].kpa;
    }
    u32* apack = amx_a_scratch.get(static_cast<std::size_t>(amx_rows(mcur)) * as);
    for (int s = 0; s < nslices; ++s) {
      const int pc = blk.ks + s * KC;
      pack_a_amx(apack, as, sl[s].a_off, p.ta, p.A, p.lda, i0, mcur, pc,
                 std::min(KC, blk.kend - pc));
    }
    const float beta = blk.ks == 0 ? p.beta : 1.f;
    alignas(64) float out[32 * 32];
    // One 32 x 32 block of C: rows [ir, ir + 32) of the tile, columns [jg, jg + 32) of panel jp
    // (whose slices sl points to).
    auto block = [&](int ir, int jp, int jg) {
      const int mr = std::min(32, mcur - ir);
      const int j0 = jp * NR, nc = std::min(32, std::min(NR, blk.nc - j0) - jg);
      const u32* ap = apack + amx_a_index(ir, 0, as);
      float* c = p.C + static_cast<long>(i0 + ir) * p.ldc + blk.jc + j0 + jg;
      // A full block with C = the sums (alpha 1, beta 0) goes from the tiles into C directly.
      const bool direct = mr == 32 && nc == 32 && p.alpha == 1.f && beta == 0.f;
      float* o = direct ? c : out;
      const long ldo = direct ? p.ldc : 32;
      if (mr > 16 && nc > 16)
        amx_block<2, 2>(nslices, sl, ap, as, jg, o, ldo);
      else if (mr > 16)
        amx_block<2, 1>(nslices, sl, ap, as, jg, o, ldo);
      else if (nc > 16)
        amx_block<1, 2>(nslices, sl, ap, as, jg, o, ldo);
      else
        amx_block<1, 1>(nslices, sl, ap, as, jg, o, ldo);
      if (!direct) amx_store(out, c, p.ldc, mr, nc, p.alpha, beta);
    };
    auto use_panel = [&](int jp) {
      for (int s = 0; s < nslices; ++s) sl[s].b = panel(blk, jp, s * KC);
      return std::min(NR, blk.nc - jp * NR);  // its columns
    };
    // Which operand stays in L1 between blocks: a 32-row group of A where it fits in half of it
    // (32 rows x as words: K <= 384), so that the tile's B panels stream by it; else a panel of B,
    // used by all of the tile's row groups in turn (the order before 2026-12-02). Every block is
    // computed alike in either order: the same values. One thread, best of 12 alternated calls,
    // c's shapes: with groups of A outermost, K = 384 and wide (1152 to 3072 columns) 1.18-1.20x
    // (1.05-1.08x in a quieter hour); with K >= 1152 0.86-0.99x, hence the choice.
    if (32L * as * static_cast<long>(sizeof(u32)) <= 24 * 1024) {
      for (int ir = 0; ir < mcur; ir += 32)
        for (int jp = jp0; jp < jp1; ++jp)
          for (int jg = 0, ncur = use_panel(jp); jg < ncur; jg += 32) block(ir, jp, jg);
    } else {
      for (int jp = jp0; jp < jp1; ++jp)
        for (int ir = 0, ncur = use_panel(jp); ir < mcur; ir += 32)
          for (int jg = 0; jg < ncur; jg += 32) block(ir, jp, jg);
    }
  };
  blocked_loops<NC_AMX>(p, allow_parallel, pack_b, tile);
}

}  // namespace normlab::gemm_bf16_detail
#endif
