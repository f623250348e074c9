// Linear layer y = x W^T + b with PyTorch's weight layout (out, in), through the BLAS with
// transpose flags (no copies). Shapes: x, dx (N, I); w, dw (O, I); b, db (O); y, dy (N, O).
// `prec` selects the product for all three GEMMs: float32 (gemm) or bf16 inputs with fp32
// accumulation (gemm_bf16, float only); outputs and accumulations are in T either way.
#pragma once
#include "ops/accum.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/threading.h"

namespace normlab::ops {

// y = x w^T + b   (overwrites y; b may be null)
template <class T>
void linear_forward(T* y, const T* x, const T* w, const T* b, int N, int I, int O,
                    GemmPrecision prec = GemmPrecision::float32) {
  if (b) {
    parallel_for(N, 16384 / O + 1, [&](long r0, long r1) {
      for (long r = r0; r < r1; ++r)
        for (int o = 0; o < O; ++o) y[r * O + o] = b[o];
    });
  }
  gemm_p<T>(prec, false, true, N, O, I, T(1), x, I, w, I, b ? T(1) : T(0), y, O);
}

// dx (+)= dy w                        (Accum::add adds, ::overwrite replaces; ops/accum.h)
// dw (+)= dy^T x                      (dw_accum: the first contribution to a gradient the model
//                                      has not zero-filled overwrites it)
// db += sum_rows dy                    (accumulates)
// dx and db may be null.
template <class T>
void linear_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int N, int I, int O,
                     Accum accum, GemmPrecision prec = GemmPrecision::float32,
                     Accum dw_accum = Accum::add) {
  if (dx) {
    const T beta = accum == Accum::add ? T(1) : T(0);
    gemm_p<T>(prec, false, false, N, I, O, T(1), dy, O, w, I, beta, dx, I);
  }
  gemm_p<T>(prec, true, false, O, I, N, T(1), dy, O, x, I, dw_accum == Accum::add ? T(1) : T(0), dw,
            I);
  if (db) {
    parallel_column_blocks(N, O, 64, [&](int o0, int o1) {
      for (int r = 0; r < N; ++r)
        for (int o = o0; o < o1; ++o) db[o] += dy[static_cast<long>(r) * O + o];
    });
  }
}

}  // namespace normlab::ops
