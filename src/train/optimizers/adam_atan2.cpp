#include "train/optimizers/adam_atan2.h"

#include <cmath>

#include <fmt/format.h>

#include "config/option_keys.h"
#include "tensor/threading.h"
#include "tensor/vec_math.h"
#include "train/optimizers/lerp.h"

namespace normlab {

namespace {

// [optim.adam_atan2] (adam-atan2-pytorch's defaults)
const OptionKey<double> kA{"adam_atan2", "a", 1.27, keytab::resume::resumable, "optim.atan2_a",
                           keytab::check::positive()};
const OptionKey<double> kB{"adam_atan2", "b", 1.0, keytab::resume::resumable, "optim.atan2_b",
                           keytab::check::positive()};

// One contiguous range, as a function of its own so that it vectorises (inside the task lambda GCC
// reloads the captured pointers and gives up). decay = 1 - lr wd (exactly 1 without decay).
template <class T>
NORMLAB_WIDE_MAP void update_row(T* __restrict p, T* __restrict g, T* __restrict m,
                                 T* __restrict v, long n, T k, T w1, T w2, T inv_bc1, T den_scale,
                                 T decay, T alpha) {
#pragma omp simd
  for (long j = 0; j < n; ++j) {
    const T gj = g[j] * k;
    g[j] = gj;
    const T mj = lerp_torch(m[j], gj, w1);
    const T vj = lerp_torch(v[j], gj * gj, w2);
    m[j] = mj;
    v[j] = vj;
    const T u = atan2_fast(mj * inv_bc1, std::sqrt(vj * den_scale));
    p[j] = p[j] * decay + alpha * u;
  }
}

}  // namespace

template <class T>
void AdamAtan2<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  const OptimConfig& c = this->cfg_;
  const double t = static_cast<double>(this->t_);
  const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
  const T w1 = static_cast<T>(1.0 - c.beta1), w2 = static_cast<T>(1.0 - c.beta2);
  const double a = kA(c), b = kB(c);
  const T inv_bc1 = static_cast<T>(1.0 / bc1), den_scale = static_cast<T>(b * b / bc2);
  const T k = static_cast<T>(grad_scale);  // 1 exactly without clipping: g * 1 = g
  for (std::size_t i = 0; i < this->m_.size(); ++i) {
    const ParamSpec& s = this->m_.spec(i);
    T* p = params.data() + s.offset;
    T* g = grads.data() + s.offset;
    T* m = this->m_.at(i);
    T* v = this->v_.at(i);
    const double mult = this->lr_multiplier(s);  // 1 but under μP
    const double wd = this->decayed(s) ? c.weight_decay / mult : 0.0;
    const T decay = static_cast<T>(1.0 - lr * mult * wd);
    const T alpha = static_cast<T>(-lr * mult * a);
    parallel_for(s.numel, 32768, [&](long b, long end) {
      update_row(p + b, g + b, m + b, v + b, end - b, k, w1, w2, inv_bc1, den_scale, decay, alpha);
    });
  }
}

template <class T>
std::string AdamAtan2<T>::describe(const ParamTable&, const OptimConfig& c) {
  return fmt::format(
      "optimizer adam_atan2: a atan2(m, b sqrt(v)) with a = {:g}, b = {:g} (no "
      "epsilon; beta2 {:g})",
      kA(c), kB(c), c.beta2);
}

template class AdamAtan2<float>;
template class AdamAtan2<double>;

}  // namespace normlab
