#include "train/optimizers/stable_adamw.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tensor/chunked_sum.h"
#include "train/optimizers/lerp.h"

namespace normlab {

namespace {

// optimi's debias_beta: b (1 - b^(t-1)) / (1 - b^t), written as (b^t - b) / (b^t - 1).
double debias_beta(double beta, long t) {
  const double bt = std::pow(beta, static_cast<double>(t));
  return (bt - beta) / (bt - 1.0);
}

// The moments of one tensor and sum(g^2 / max(v, eps^2)), in chunks summed in order (the same
// result at any thread count). g is scaled by k and written back.
template <class T>
double moments(T* g, T* m, T* v, long n, T w1, T b2, T e2, T k, bool scaled) {
  return chunked_sum(n, 32768, [&](long b, long end) {
    double s = 0;
    for (long i = b; i < end; ++i) {
      const T gi = scaled ? g[i] * k : g[i];
      g[i] = gi;
      m[i] = lerp_torch(m[i], gi, w1);
      const T vi = v[i] * b2 + gi * gi * (T(1) - b2);
      v[i] = vi;
      s += static_cast<double>(gi * gi / std::max(vi, e2));
    }
    return s;
  });
}

}  // namespace

template <class T>
void StableAdamW<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  const OptimConfig& c = this->cfg_;
  const double b1t = debias_beta(c.beta1, this->t_), b2t = debias_beta(c.beta2, this->t_);
  const T w1 = static_cast<T>(1.0 - b1t), b2 = static_cast<T>(b2t);
  const T e = static_cast<T>(c.eps), e2 = static_cast<T>(c.eps * c.eps);
  const T k = static_cast<T>(grad_scale);
  for (std::size_t i = 0; i < this->m_.size(); ++i) {
    const ParamSpec& s = this->m_.spec(i);
    T* p = params.data() + s.offset;
    T* m = this->m_.at(i);
    T* v = this->v_.at(i);
    const double ss = moments(grads.data() + s.offset, m, v, s.numel, w1, b2, e2, k,
                              grad_scale != 1.0);
    const double r = std::sqrt(ss / static_cast<double>(s.numel));
    const double mult = this->lr_multiplier(s);  // 1 but under μP
    const double lr_t = lr * mult / std::max(1.0, r);
    const T decay = static_cast<T>(1.0 - lr_t * (this->decayed(s) ? c.weight_decay / mult : 0.0));
    const T step = static_cast<T>(lr_t);
    parallel_for(s.numel, 32768, [&](long b, long end) {
      for (long j = b; j < end; ++j) p[j] = p[j] * decay - step * (m[j] / (std::sqrt(v[j]) + e));
    });
  }
}

template <class T>
std::string StableAdamW<T>::describe(const ParamTable&, const OptimConfig& c) {
  return fmt::format(
      "optimizer stable_adamw: AdamW with per-tensor update clipping (beta2 {:g}, "
      "eps {:g})",
      c.beta2, c.eps);
}

template class StableAdamW<float>;
template class StableAdamW<double>;

}  // namespace normlab
