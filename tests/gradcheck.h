// The one gradient-check harness: central differences in double precision. A random projection
// L = sum(out * R) turns any op into a scalar; its analytic gradient is the op's backward applied
// to dout = R. Each op's test contributes a GradCase.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
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

// Error of one tensor's analytic gradient against its central differences. A plain running max
// (std::fmax) would drop NaN, so that an all-NaN gradient reported error 0 and passed: every
// non-finite numeric or analytic value is counted instead, and rel() is +inf when there is one.
struct TensorError {
  double max_num = 0;   // max |numeric|
  double max_diff = 0;  // max |numeric - analytic|
  long non_finite = 0;  // entries where either value is NaN or infinite

  void add(double numeric, double analytic) {
    if (!std::isfinite(numeric) || !std::isfinite(analytic)) {
      ++non_finite;
      return;
    }
    max_num = std::max(max_num, std::fabs(numeric));
    max_diff = std::max(max_diff, std::fabs(numeric - analytic));
  }
  // max |diff| / max(max |numeric|, floor); +inf when any value was non-finite.
  double rel(double floor) const {
    if (non_finite > 0) return std::numeric_limits<double>::infinity();
    return max_diff / std::max(max_num, floor);
  }
};

// Largest relative error over inputs, max_i |analytic_i - numeric_i| / max(max_i |numeric_i|,
// floor), or +inf when any analytic or numeric value is NaN or infinite (EXPECT_LT(err, kTol)
// then fails).
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
    if (analytic.size() <= t || analytic[t].size() != in[t].size())
      return std::numeric_limits<double>::infinity();  // a backward of the wrong shape fails too
    TensorError err;
    for (std::size_t i = 0; i < in[t].size(); ++i) {
      const double x0 = in[t][i];
      in[t][i] = x0 + h;
      const double lp = loss(in);
      in[t][i] = x0 - h;
      const double lm = loss(in);
      in[t][i] = x0;
      err.add((lp - lm) / (2 * h), analytic[t][i]);
    }
    worst = std::max(worst, err.rel(1e-10));
  }
  return worst;
}

// Records the worst error of a test group so the suite can print a summary.
inline void report(const std::string& group, const std::string& name, double err) {
  std::printf("[gradcheck] group=%s case=%s max_rel_err=%.3e\n", group.c_str(), name.c_str(), err);
}

constexpr double kTol = 1e-6;

}  // namespace normlab::test
