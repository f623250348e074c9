// The bf16 GEMM without bf16 hardware (gemm_bf16.h's rounded_float kernel): the operands rounded
// to bf16 into float copies, multiplied by the float32 kernel.
#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/bf16.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16_detail.h"
#include "tensor/threading.h"

namespace normlab::gemm_bf16_detail {

namespace {

// Without AVX512-BF16: the operands rounded to bf16 (held as floats, which is exact) into dense
// copies, then the float32 kernel (gemm.h), which sums their exact products in fp32. The same
// contract as the hardware kernel, at float32 speed (a bf16 product is no faster there); summed in
// the float32 kernel's order. Copies: rows x cols of the operand as stored.
thread_local std::vector<float> a_round, b_round;

const float* rounded_copy(std::vector<float>& out, const float* X, long ld, int rows, int cols) {
  out.resize(static_cast<std::size_t>(rows) * cols);
  float* o = out.data();
  parallel_for(rows, std::max(1, 65536 / std::max(cols, 1)), [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) {
      const float* x = X + r * ld;
      float* y = o + r * cols;
#pragma omp simd
      for (int c = 0; c < cols; ++c) {
        const u32 w = bf16_word(x[c]) << 16;
        float f;
        std::memcpy(&f, &w, 4);
        y[c] = f;
      }
    }
  });
  return o;
}

}  // namespace

void gemm_bf16_via_float(const Problem& p) {
  const int ar = p.ta ? p.K : p.M, ac = p.ta ? p.M : p.K;
  const int br = p.tb ? p.N : p.K, bc = p.tb ? p.K : p.N;
  const float* A = rounded_copy(a_round, p.A, p.lda, ar, ac);
  const float* B = rounded_copy(b_round, p.B, p.ldb, br, bc);
  gemm<float>(p.ta, p.tb, p.M, p.N, p.K, p.alpha, A, ac, B, bc, p.beta, p.C,
              static_cast<int>(p.ldc));
}

}  // namespace normlab::gemm_bf16_detail
