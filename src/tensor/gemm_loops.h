// The loops around a packed-B GEMM micro-kernel (Goto & van de Geijn 2008; BLIS's five loops),
// shared by the float32 kernel (gemm.cpp) and the bf16 ones (gemm_bf16_avx512.cpp,
// gemm_bf16_amx.cpp), which differ only in how they pack and multiply. Row-major C(M, N) = alpha op(A) op(B) + beta C, as in gemm.h.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "tensor/threading.h"

namespace normlab::gemm_detail {

// MR x NR micro-tiles; KC sums per packed slice; MC rows per block of A; KS sums of op(B) packed at
// a time. How many columns of op(B) are packed at a time is each kernel's own (NC below).
constexpr int MR = 6, NR = 64;
constexpr int KC = 256, MC = 96;
constexpr int KS = 16 * KC;
static_assert(MC % MR == 0 && KC % 2 == 0);

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

// Scratch that grows and is then reused: nothing is allocated in steady state.
template <class T>
struct Scratch {
  T* p = nullptr;
  std::size_t n = 0;
  T* get(std::size_t need) {
    if (need > n) {
      std::free(p);
      n = (need + 1023) / 1024 * 1024;
      p = static_cast<T*>(std::aligned_alloc(64, n * sizeof(T)));
    }
    return p;
  }
  ~Scratch() { std::free(p); }
};

// f(std::integral_constant<int, NV>()) with NV = the 16-wide vectors that nc (1..NR) columns
// need: micro-kernels are instantiated per width.
template <class F>
void with_vectors(int nc, F&& f) {
  static_assert(NR == 64);
  switch ((nc + 15) / 16) {
    case 1:
      f(std::integral_constant<int, 1>());
      break;
    case 2:
      f(std::integral_constant<int, 2>());
      break;
    case 3:
      f(std::integral_constant<int, 3>());
      break;
    default:
      f(std::integral_constant<int, 4>());
      break;
  }
}

// C = beta C (K = 0: no products).
inline void scale_c(const Problem& p) {
  for (int i = 0; i < p.M; ++i) {
    float* c = p.C + i * p.ldc;
    if (p.beta == 0.f)
      std::memset(c, 0, sizeof(float) * p.N);
    else
      for (int j = 0; j < p.N; ++j) c[j] *= p.beta;
  }
}

// The width of the column blocks of an N-column product: as few blocks of at most NC columns as
// there can be, of equal widths in whole NR-panels (the last one may be narrower): 1152 columns at
// NC = 512 are 3 x 384, not 512 + 512 + 128. Sizes the packed op(B) of a block, too.
template <int NC>
int block_width(int N) {
  static_assert(NC % NR == 0);
  const int nblocks = (N + NC - 1) / NC;
  return ((N + nblocks - 1) / nblocks + NR - 1) / NR * NR;
}

// Sums of op(B) one block packs at most: K in whole KC-slices, at most KS (sizes the packed op(B)
// with block_width).
inline int packed_sums(int K) { return std::min(KS, (std::max(K, 0) + KC - 1) / KC * KC); }

// One block of columns x KS sums: columns [jc, jc + nc) in npanels NR-panels, sums [ks, kend).
struct Block {
  int jc, nc, npanels, ks, kend;
};

// Blocks of block_width<NC>(N) columns x KS sums one after the other; for each, op(B) is packed
// first (pack_b(block, panel, slice start relative to ks), the units claimed by the threads when
// the block is large), then the tiles are claimed by the threads from a shared counter
// (parallel_for), so that a thread the OS has put aside does not hold the others back: tile(block,
// i0, mcur, jp0, jp1) computes rows [i0, i0 + mcur) x panels [jp0, jp1) over all the block's sums.
// A tile is computed by one thread from its first sum to its last, in a fixed order: results do not
// depend on the number of threads. K <= 0 only scales C.
template <int NC, class PackB, class Tile>
void blocked_loops(const Problem& p, bool allow_parallel, PackB&& pack_b, Tile&& tile) {
  if (p.M <= 0 || p.N <= 0) return;
  if (p.K <= 0) {
    scale_c(p);
    return;
  }
  const double flops = 2.0 * p.M * p.N * p.K;
  const bool par = allow_parallel && !in_parallel() && thread_count() > 1 && flops > 4e6;
  const int nth = par ? thread_count() : 1;
  const int mblocks_max = (p.M + MC - 1) / MC;
  const int width = block_width<NC>(p.N);
  for (int jc = 0; jc < p.N; jc += width)
    for (int ks = 0; ks < p.K; ks += KS) {
      const int nc = std::min(width, p.N - jc);
      const Block blk{jc, nc, (nc + NR - 1) / NR, ks, std::min(p.K, ks + KS)};
      const long kslices = (blk.kend - ks + KC - 1) / KC;
      const long nwork = blk.npanels * kslices;
      auto pack = [&](long w) {
        pack_b(blk, static_cast<int>(w % blk.npanels), static_cast<int>(w / blk.npanels) * KC);
      };
      if (par && static_cast<long>(nc) * (blk.kend - ks) >= (1L << 17))
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
      while (nth > 1 && mblocks * nsplit < 4 * nth && nsplit * 2 <= blk.npanels) ++nsplit;
      const long ntiles = static_cast<long>(mblocks) * nsplit;
      auto one = [&](long t) {
        const int mb = static_cast<int>(t / nsplit), ns = static_cast<int>(t % nsplit);
        const int i0 = mb * mc;
        tile(blk, i0, std::min(mc, p.M - i0), blk.npanels * ns / nsplit,
             blk.npanels * (ns + 1) / nsplit);
      };
      if (par)
        parallel_for(ntiles, 1, [&](long b, long e) {
          for (long t = b; t < e; ++t) one(t);
        });
      else
        for (long t = 0; t < ntiles; ++t) one(t);
    }
}

}  // namespace normlab::gemm_detail
