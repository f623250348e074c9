// The one gradient-check harness: central differences in double precision. A random projection
// L = sum(out * R) turns any op into a scalar; its analytic gradient is the op's backward applied
// to dout = R. Each op's test contributes a GradCase.
#pragma once
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tensor/rng.h"

namespace normlab::test {

using Vec = std::vector<double>;

struct GradCase {
  std::vector<Vec> inputs;            // every tensor the op reads
  std::vector<bool> differentiable;   // which inputs to check (default: all)
  std::function<Vec(const std::vector<Vec>&)> forward;
  // Gradients of sum(out * dout) w.r.t. each input (same sizes as inputs; ignored where not
  // differentiable).
  std::function<std::vector<Vec>(const std::vector<Vec>&, const Vec&)> backward;
};

inline Vec random_vec(std::size_t n, Rng& rng, double scale = 1.0, double shift = 0.0) {
  Vec v(n);
  for (auto& x : v) x = shift + scale * rng.normal();
  return v;
}

// Largest relative error over inputs: max_i |analytic_i - numeric_i| / max(max_i |numeric_i|, floor).
inline double grad_check(const GradCase& c, std::uint64_t seed = 7, double h = 1e-5) {
  Rng rng(seed);
  std::vector<Vec> in = c.inputs;
  const Vec out0 = c.forward(in);
  const Vec R = random_vec(out0.size(), rng);
  const std::vector<Vec> analytic = c.backward(in, R);
  auto loss = [&](const std::vector<Vec>& x) {
    const Vec o = c.forward(x);
    double s = 0;
    for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * R[i];
    return s;
  };
  double worst = 0;
  for (std::size_t t = 0; t < in.size(); ++t) {
    if (!c.differentiable.empty() && !c.differentiable[t]) continue;
    double max_num = 0, max_diff = 0;
    for (std::size_t i = 0; i < in[t].size(); ++i) {
      const double x0 = in[t][i];
      in[t][i] = x0 + h;
      const double lp = loss(in);
      in[t][i] = x0 - h;
      const double lm = loss(in);
      in[t][i] = x0;
      const double num = (lp - lm) / (2 * h);
      max_num = std::fmax(max_num, std::fabs(num));
      max_diff = std::fmax(max_diff, std::fabs(num - analytic[t][i]));
    }
    worst = std::fmax(worst, max_diff / std::fmax(max_num, 1e-10));
  }
  return worst;
}

// Records the worst error of a test group so the suite can print a summary.
inline void report(const std::string& group, const std::string& name, double err) {
  std::printf("[gradcheck] group=%s case=%s max_rel_err=%.3e\n", group.c_str(), name.c_str(), err);
}

constexpr double kTol = 1e-6;

}  // namespace normlab::test
