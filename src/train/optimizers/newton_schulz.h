// Newton-Schulz orthogonalisation of a matrix, Muon's core (Jordan et al. 2024; torch.optim.Muon's
// _zeropower_via_newtonschulz): with X the (m, n) matrix transposed if it is taller than wide,
//   X = X / max(||X||_F, eps);  repeat `steps` times:  A = X X^T;  B = b A + c A A;  X = a X + B X
// and X transposed back. The quintic's coefficients (a, b, c) = (3.4445, -4.7750, 2.0315) push
// every singular value towards [0.7, 1.2] rather than exactly 1 (see the reference).
// In bf16 (train.matmul_precision) the iterate is rounded to bf16 after every operation, with
// float32 accumulation inside each product, as the reference does on every device; in float32 the
// products are normlab's float32 GEMM.
#pragma once
#include <vector>

#include "tensor/gemm_bf16.h"

namespace normlab {

struct NsCoefficients {
  double a, b, c;
  int steps;
  double eps;
};

template <class T>
class NewtonSchulz {
 public:
  // Scratch for matrices of up to max_elems elements and max_rows rows in their short dimension.
  void reserve(long max_elems, long max_short);
  // out (rows, cols) = NS(in (rows, cols)); in and out may be the same.
  void run(const T* in, T* out, int rows, int cols, const NsCoefficients& k, GemmPrecision prec);

 private:
  std::vector<T> x_, x2_, a_, b_;
};

extern template class NewtonSchulz<float>;
extern template class NewtonSchulz<double>;

}  // namespace normlab
