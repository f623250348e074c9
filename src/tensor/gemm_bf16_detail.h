// What the bf16 GEMM's translation units share: the instruction-set macros, the packed words and
// the kernels' entry points, which gemm_bf16.cpp (the dispatch) calls. The kernels: AVX512-BF16
// and its portable model (gemm_bf16_avx512.cpp), AMX (gemm_bf16_amx.cpp), the float32 kernel on
// bf16-rounded copies (gemm_bf16_rounded.cpp). Private to src/tensor.
#pragma once
#include <cstdint>

#include "tensor/gemm_loops.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define NL_BF16_X86 1
#include <immintrin.h>
// The AVX512-BF16 code is compiled for that target whatever the build flags; it only runs when
// the CPU reports the feature (bf16_hardware()).
#define NL_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
// GCC 12 flags the undefined pass-through operand inside its own AVX-512 intrinsic headers as
// possibly uninitialised (a false positive, GCC bug 105593), as in gemm.cpp.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__linux__)
// AMX (Intel's tile unit, Sapphire Rapids and later): tdpbf16ps multiplies a 16 x 32 bf16 tile by
// a 32 x 16 one into 16 x 16 fp32 sums. Linux hands the tile registers to a process only after
// it asks (arch_prctl ARCH_REQ_XCOMP_PERM), so it is used only where that request succeeds.
#define NL_AMX 1
#define NL_TARGET_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512bf16")))
#endif
#endif

namespace normlab::gemm_bf16_detail {

using u32 = std::uint32_t;

// Blocking, Problem and loops as in gemm.cpp (gemm_loops.h). Sums are taken in pairs: a packed
// "word" holds bf16 of sums k (low half) and k + 1 (high half); an odd last sum is paired with 0
// on both sides, so the padding adds 0 * 0.
using namespace gemm_detail;

// Packed op(B), one per thread, shared by the blocked and the AMX kernel: KS / 2 x NC words at
// most (8 MiB; AMX: 16).
inline thread_local Scratch<u32> b_scratch;

// The kernels, with gemm_bf16's contract (gemm_bf16.h) on p; M, N > 0.
// The 6 x 64 micro-kernels over k-pair words: AVX512-BF16's where `hardware`, else the portable
// one (gemm_bf16_avx512.cpp).
void gemm_bf16_blocked(const Problem& p, bool allow_parallel, bool hardware);
#if defined(NL_AMX)
// AMX tiles, 32 x 32 blocks (gemm_bf16_amx.cpp).
void gemm_bf16_amx(const Problem& p, bool allow_parallel);
#endif
// The float32 kernel on bf16-rounded copies (gemm_bf16_rounded.cpp); K > 0.
void gemm_bf16_via_float(const Problem& p);

}  // namespace normlab::gemm_bf16_detail
