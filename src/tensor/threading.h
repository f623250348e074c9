// One threading policy for the whole process: OpenMP. Our kernels and the float matrix products
// (gemm.h) run on the OpenMP threads, by default as many as the cores this process may use; the
// BLAS is kept single-threaded where normlab's own sgemm is compiled in (AVX-512), so two pools
// of spinning threads never compete for the same cores.
#pragma once

namespace normlab {

// n <= 0: all available cores. Returns the count in effect.
int set_thread_count(int n);
int available_cores();

}  // namespace normlab
