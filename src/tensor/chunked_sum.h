// A sum over parallel chunks that does not depend on the thread count: each chunk's partial in
// double, added in chunk order (the optimizers' reductions: sums of squares, Adam moments).
#pragma once
#include "tensor/threading.h"

namespace normlab {

// The sum over the chunks of [0, n) (Chunks(n, grain)) of body(begin, end).
template <class F>
double chunked_sum(long n, long grain, F&& body) {
  const Chunks ch(n, grain);
  double part[kMaxChunks] = {};
  parallel_chunks_indexed(ch, [&](long c, long b, long e) { part[c] = body(b, e); });
  double s = 0;
  for (long c = 0; c < ch.count; ++c) s += part[c];
  return s;
}

// Such a sum as the float T that a reference's reduction returns (torch's norm or mean, read with
// .item()): rounded to T once.
template <class T>
double rounded(double v) {
  return static_cast<double>(static_cast<T>(v));
}

}  // namespace normlab
