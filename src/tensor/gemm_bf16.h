// Mixed-precision matrix product: bf16 inputs, fp32 accumulation and output (the "AMP" matmul of
// Micikevicius et al. 2018 with bfloat16 in place of fp16; Kalamkar et al. 2019, "A Study of
// BFLOAT16 for Deep Learning Training"). Same contract as gemm<float> (gemm.h):
//   C(M, N) = alpha * bf16(op(A))(M, K) * bf16(op(B))(K, N) + beta * C
// where bf16(x) rounds each input element to bfloat16 (round to nearest, ties to even; NaN stays
// NaN, infinities stay infinite, overflow goes to infinity) while it is packed. Products of two
// bf16 values are exact in fp32; they are summed in fp32, so the result differs from the exact
// product of the rounded inputs only by fp32 accumulation error, and from the float32 product of
// the unrounded inputs by at most about 2^-8 relative per product (|bf16(x) - x| <= 2^-9 |x|).
// With beta = 0, C is not read (it may hold NaN).
//
// Kernels (Bf16Kernel below): op(B) is packed into 64-column panels of k-pairs (one 32-bit word
// holds bf16(b(k, j)) in its low half and bf16(b(k + 1, j)) in its high half), blocks of op(A)
// into rows of k-pairs, and micro-tiles are accumulated in fp32 by AMX's tdpbf16ps (32 x 32
// blocks) where Linux grants the process the tile registers, else by AVX512-BF16's vdpbf16ps
// (6 x 64). Both run on normlab's thread pool, parallel over tiles of C, with the same blocking
// and the same thread-count-independent results as gemm<float>.
//
// CPU support: the AMX and AVX512-BF16 code is compiled with function target attributes, whatever
// the build flags, and chosen at run time from what the CPU reports (bf16_kernel()). Elsewhere
// gemm_bf16 rounds the operands to bf16 into float copies and runs the float32 kernel (gemm.h) on
// them: the same result up to fp32 summation order, at float32 speed (nothing gained over float32
// on such a CPU; train.matmul_precision = "auto" picks float32 there). The portable kernel packs
// the bf16 pairs as the hardware kernels do and accumulates them in scalar code: slow, kept as the
// tests' model of the hardware kernels on any CPU. One difference: vdpbf16ps and tdpbf16ps treat
// bf16 subnormal inputs (|x| < 2^-126) as zero and flush subnormal results; the fallbacks keep
// them. Neither matters at the magnitudes of training.
#pragma once
#include <type_traits>

#include "tensor/bf16.h"  // bf16(x): bf16_bits, round_to_bf16
#include "tensor/gemm.h"

namespace normlab {

// Which product a matmul uses; a plain switch for kernels and ops (nothing here knows the config).
enum class GemmPrecision { float32, bf16 };

// The kernels behind gemm_bf16, all with the contract above:
//   amx            Intel AMX tiles (tdpbf16ps; Sapphire Rapids and later, where Linux grants the
//                  process the tile registers): 32 x 32 blocks of C as 2 x 2 tiles of 16 x 16;
//   avx512bf16     AVX512-BF16's vdpbf16ps, 6 x 64 micro-tiles;
//   rounded_float  bf16-rounded float copies through the float32 kernel (any CPU);
//   portable       the hardware kernels' packed words summed in scalar code (any CPU; slow; the
//                  tests' model of the hardware kernels).
// They sum in different orders (avx512bf16 and portable add a KC-slice of products at a time to
// C, amx all of a block's sums in its tiles, rounded_float as gemm<float>), so they can differ by
// fp32 summation order, not more; each gives results independent of the thread count.
enum class Bf16Kernel { amx, avx512bf16, rounded_float, portable };
inline constexpr Bf16Kernel kBf16Kernels[] = {Bf16Kernel::amx, Bf16Kernel::avx512bf16,
                                              Bf16Kernel::rounded_float, Bf16Kernel::portable};
bool bf16_kernel_available(Bf16Kernel k);
// "amx", "avx512bf16", "float32 kernel on bf16-rounded copies", "portable" (benchmarks' JSON).
const char* bf16_kernel_name(Bf16Kernel k);
// The kernel named by its enumerator's spelling or by bf16_kernel_name; throws
// std::invalid_argument listing the names otherwise.
Bf16Kernel bf16_kernel_from_name(const char* name);
// The kernel gemm_bf16 runs: the one set by set_bf16_kernel, else the first available of amx,
// avx512bf16, rounded_float.
Bf16Kernel bf16_kernel();
// For benchmarks and tests, process-wide; throws std::invalid_argument naming the kernel when
// this CPU cannot run it. reset_bf16_kernel goes back to the best available.
void set_bf16_kernel(Bf16Kernel k);
void reset_bf16_kernel();

// True when the CPU has native bf16 dot products (AMX or AVX512-BF16).
bool bf16_hardware();

// Uses the pool's threads when called from serial code and the product is large enough; runs on
// the calling thread alone when called from inside a pool job.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A,
               int lda, const float* B, int ldb, float beta, float* C, int ldc);
// The same with a given kernel (throws std::invalid_argument when it is not available).
void gemm_bf16_with(Bf16Kernel kernel, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                    const float* A, int lda, const float* B, int ldb, float beta, float* C,
                    int ldc);

// gemm_bf16_with(Bf16Kernel::portable, ...).
void gemm_bf16_portable(bool trans_a, bool trans_b, int M, int N, int K, float alpha,
                        const float* A, int lda, const float* B, int ldb, float beta, float* C,
                        int ldc);

// gemm<T> or, for float with GemmPrecision::bf16, gemm_bf16. double always takes gemm<double>
// (callers refuse bf16 for double models before getting here).
template <class T>
void gemm_p(GemmPrecision prec, bool trans_a, bool trans_b, int M, int N, int K, T alpha,
            const T* A, int lda, const T* B, int ldb, T beta, T* C, int ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (prec == GemmPrecision::bf16) {
      gemm_bf16(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
  }
  gemm<T>(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace normlab
