// Per-chunk partial sums over rows, for the parameter gradients of the norms (dw, db): a backward
// that walks its rows in parallel_chunks_indexed chunks (tensor/threading.h) sums each chunk's
// rows, in order, into that chunk's own row of partials while the row is in cache, and the
// partials are then added in chunk order. Chunk bounds depend only on the problem size, so the
// result does not depend on the thread count, and the rows are read once instead of twice.
#pragma once
#include "tensor/threading.h"

namespace normlab::ops {

struct RowPartials;  // thread_scratch's owner tag

// Scratch for n partial values, owned by the calling thread (the workers of one parallel loop
// write into their caller's buffer; nested loops run serially, so one buffer per thread
// suffices). Two slots, for the dw and db of one call. Contents are undefined: each chunk zeroes
// its own row.
template <class T>
T* row_chunk_partials(long n, int slot = 0) {
  return thread_scratch<RowPartials, 2, T>(slot, n);
}

// part[c] = sum over chunks k, in order, of part[k * C + c]: the sums build up in part's first
// row (the other rows are consumed).
template <class T>
void sum_row_chunk_partials(T* part, long chunks, int C) {
  for (long k = 1; k < chunks; ++k) {
    const T* pk = part + k * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) part[c] += pk[c];
  }
}

// dst[c] += sum over chunks k, in order, of part[k * C + c] (part's contents are consumed).
template <class T>
void add_row_chunk_partials(T* dst, T* part, long chunks, int C) {
  sum_row_chunk_partials(part, chunks, C);
#pragma omp simd
  for (int c = 0; c < C; ++c) dst[c] += part[c];
}

}  // namespace normlab::ops
