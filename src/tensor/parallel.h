// Splitting a loop over [0, n) into one contiguous chunk per OpenMP thread. The body gets plain
// (begin, end) bounds, so that its inner loop is a simple unit-stride loop over local pointers
// that the compiler vectorises (an `omp parallel for simd` over captured pointers may not be).
#pragma once
#include <omp.h>

namespace normlab {

// Runs body(begin, end) over chunks of [0, n); serially when n <= serial_below or when already
// inside a parallel region. Chunk bounds are multiples of 16 elements (64-byte lines of float).
template <class F>
void parallel_chunks(long n, long serial_below, F&& body) {
  if (n <= serial_below || omp_in_parallel() || omp_get_max_threads() == 1) {
    body(0L, n);
    return;
  }
#pragma omp parallel
  {
    const long nt = omp_get_num_threads(), t = omp_get_thread_num();
    const long b = (n * t / nt) / 16 * 16;
    const long e = t == nt - 1 ? n : (n * (t + 1) / nt) / 16 * 16;
    if (e > b) body(b, e);
  }
}

}  // namespace normlab
