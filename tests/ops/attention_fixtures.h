// What the attention tests share (test_attention.cpp, test_attention_sink.cpp): a case's shape and
// name, and the direct, unfused formula the kernels are checked against.
#pragma once
#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "ops/attention.h"

namespace normlab::test {

// A case's shape: H query heads over Hkv key/value heads, window W (0 = causal).
struct AttnShape {
  int B, T, H, Hkv, D, W;
  int Cq() const { return H * D; }
  int Ckv() const { return Hkv * D; }
  long nq() const { return static_cast<long>(B) * T * Cq(); }
  long nkv() const { return static_cast<long>(B) * T * Ckv(); }
  // The kernels' arguments (ops/attention.h) for this case: its sizes, its scores (the window W),
  // and contiguous q, k, v (rows Cq, Ckv, Ckv wide) and their gradients.
  ops::AttnShape dims() const { return {B, T, H, Hkv, D}; }
  template <class X>
  ops::AttnScores<X> scores(X scale, X cap, const X* sink = nullptr) const {
    return {scale, cap, W, sink};
  }
  template <class X>
  ops::AttnInputs<X> inputs(const X* q, const X* k, const X* v) const {
    return {{q, Cq()}, {k, Ckv()}, {v, Ckv()}};
  }
  template <class X>
  ops::AttnGrads<X> grads(X* dq, X* dk, X* dv, X* dsink_bh = nullptr) const {
    return {{dq, Cq()}, {dk, Ckv()}, {dv, Ckv()}, dsink_bh};
  }
};

inline std::string shape_name(const AttnShape& s) {
  return fmt::format("B{}_T{}_H{}_Hkv{}_D{}_W{}", s.B, s.T, s.H, s.Hkv, s.D, s.W);
}

// o (B, T, H D) by the formula, in double: for query i of head h (key/value head h / (H / Hkv)),
// the scores s_j = cap(scale q_i . k_j) over the keys it sees (j <= i, and j > i - W with a
// window), p = softmax over them and, when sink is given, one more logit sink[h] (never capped,
// value zero), o = sum_j p_j v_j.
inline std::vector<double> direct_attention(const AttnShape& sh, const std::vector<double>& q,
                                            const std::vector<double>& k,
                                            const std::vector<double>& v, double scale,
                                            double cap, const double* sink = nullptr) {
  const int T = sh.T, D = sh.D, Cq = sh.Cq(), Ckv = sh.Ckv(), G = sh.H / sh.Hkv;
  std::vector<double> o(static_cast<std::size_t>(sh.nq()), 0.0);
  for (int b = 0; b < sh.B; ++b)
    for (int h = 0; h < sh.H; ++h)
      for (int i = 0; i < T; ++i) {
        const int hk = h / G;
        std::vector<double> s;
        std::vector<int> keys;
        double m = sink ? sink[h] : -1e300;
        for (int j = 0; j <= i; ++j) {
          if (sh.W > 0 && j <= i - sh.W) continue;
          double d = 0;
          for (int x = 0; x < D; ++x)
            d += q[(b * T + i) * Cq + h * D + x] * k[(b * T + j) * Ckv + hk * D + x];
          d *= scale;
          if (cap > 0) d = cap * std::tanh(d / cap);
          s.push_back(d);
          keys.push_back(j);
          m = std::fmax(m, d);
        }
        double z = sink ? std::exp(sink[h] - m) : 0.0;
        for (double& x : s) z += (x = std::exp(x - m));
        for (int x = 0; x < D; ++x) {
          double acc = 0;
          for (std::size_t n = 0; n < keys.size(); ++n)
            acc += s[n] / z * v[(b * T + keys[n]) * Ckv + hk * D + x];
          o[(b * T + i) * Cq + h * D + x] = acc;
        }
      }
  return o;
}

}  // namespace normlab::test
