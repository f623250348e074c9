// Small helpers shared by the Transformer's translation units (transformer.cpp, sublayer.cpp,
// branches.cpp): private to src/model.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/params.h"
#include "normlab/config.h"
#include "normlab/errors.h"
#include "ops/activation.h"
#include "ops/rope.h"
#include "tensor/threading.h"

namespace normlab::model_detail {

// Index of the parameter at arena offset off (the table's offsets increase in declaration order).
inline std::size_t spec_at(const ParamTable& t, long off) {
  const auto& sp = t.specs();
  const auto it = std::lower_bound(sp.begin(), sp.end(), off,
                                   [](const ParamSpec& s, long o) { return s.offset < o; });
  NL_CHECK(it != sp.end() && it->offset == off, "no parameter starts at arena offset {}", off);
  return static_cast<std::size_t>(it - sp.begin());
}

inline bool gated(MlpKind m) { return m == MlpKind::swiglu || m == MlpKind::geglu; }

// The RoPE scaling of global layers, as the kernel takes it.
inline ops::RopeScale rope_scale(const ModelConfig& m) {
  ops::RopeScale s;
  switch (m.rope_scaling) {
    case RopeScaling::none: s.kind = ops::RopeScale::Kind::none; break;
    case RopeScaling::linear: s.kind = ops::RopeScale::Kind::linear; break;
    case RopeScaling::llama3: s.kind = ops::RopeScale::Kind::llama3; break;
  }
  s.factor = m.rope_factor;
  s.low_freq_factor = m.rope_low_freq_factor;
  s.high_freq_factor = m.rope_high_freq_factor;
  s.original_seq_len = m.rope_original_seq_len;
  return s;
}

inline ops::Activation activation_of(MlpKind m) {
  switch (m) {
    case MlpKind::gelu: return ops::Activation::gelu_erf;
    case MlpKind::gelu_tanh: return ops::Activation::gelu_tanh;
    case MlpKind::swiglu: return ops::Activation::silu;
    case MlpKind::geglu: return ops::Activation::gelu_tanh;
  }
  return ops::Activation::gelu_erf;
}

template <class T>
double max_abs(const T* x, long n) {
  const Chunks ch(n, 32768);
  double part[kMaxChunks] = {};
  parallel_chunks_indexed(ch, [&](long c, long b, long e) {
    double m = 0;
    for (long i = b; i < e; ++i) m = std::fmax(m, std::fabs(static_cast<double>(x[i])));
    part[c] = m;
  });
  double m = 0;
  for (long c = 0; c < ch.count; ++c) m = std::fmax(m, part[c]);
  return m;
}

// The sum of squares, RMS and largest magnitude of x[0, n), in chunks combined in order (the same
// at any thread count).
struct SizeStats {
  double sum_sq = 0, rms = 0, max_abs = 0;
};
template <class T>
SizeStats sum_sq_max(const T* x, long n) {
  const Chunks ch(n, 32768);
  double part_ss[kMaxChunks] = {}, part_mx[kMaxChunks] = {};
  parallel_chunks_indexed(ch, [&](long c, long b, long e) {
    double s2 = 0, m = 0;
    for (long i = b; i < e; ++i) {
      s2 += static_cast<double>(x[i]) * x[i];
      m = std::fmax(m, std::fabs(static_cast<double>(x[i])));
    }
    part_ss[c] = s2;
    part_mx[c] = m;
  });
  SizeStats st;
  for (long c = 0; c < ch.count; ++c) st.sum_sq += part_ss[c], st.max_abs = std::fmax(st.max_abs, part_mx[c]);
  st.rms = n > 0 ? std::sqrt(st.sum_sq / static_cast<double>(n)) : 0.0;
  return st;
}

// Copies columns [col, col + C) of src (N, ld) into dst (N, C), or back.
template <class T>
void gather_cols(T* dst, const T* src, long N, int C, int ld, int col) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) std::memcpy(dst + r * C, src + r * ld + col, sizeof(T) * C);
  });
}
template <class T>
void scatter_cols(T* dst, const T* src, long N, int C, int ld, int col) {
  parallel_for(N, 16384 / C + 1, [&](long r0, long r1) {
    for (long r = r0; r < r1; ++r) std::memcpy(dst + r * ld + col, src + r * C, sizeof(T) * C);
  });
}

// y = alpha x + g over n elements.
template <class T>
void scaled_add(T* y, T alpha, const T* x, const T* g, long n) {
  parallel_for(n, 16384, [&](long b, long e) {
    const T* xs = x + b;
    const T* gs = g ? g + b : nullptr;
    T* ys = y + b;
    if (gs) {
#pragma omp simd
      for (long i = 0; i < e - b; ++i) ys[i] = alpha * xs[i] + gs[i];
    } else {
#pragma omp simd
      for (long i = 0; i < e - b; ++i) ys[i] = alpha * xs[i];
    }
  });
}

}  // namespace normlab::model_detail
