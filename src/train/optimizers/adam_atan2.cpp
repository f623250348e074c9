#include "train/optimizers/adam_atan2.h"

#include <cmath>

#include "tensor/threading.h"
#include "tensor/vec_math.h"
#include "train/optimizers/lerp.h"

namespace normlab {

template <class T>
void AdamAtan2<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  const OptimConfig& c = this->cfg_;
  const double t = static_cast<double>(this->t_);
  const double bc1 = 1.0 - std::pow(c.beta1, t), bc2 = 1.0 - std::pow(c.beta2, t);
  const T w1 = static_cast<T>(1.0 - c.beta1), w2 = static_cast<T>(1.0 - c.beta2);
  const T inv_bc1 = static_cast<T>(1.0 / bc1), den_scale = static_cast<T>(c.atan2_b * c.atan2_b / bc2);
  const T alpha = static_cast<T>(-lr * c.atan2_a);
  const T k = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0;
  for (std::size_t i = 0; i < this->m_.specs.size(); ++i) {
    const ParamSpec& s = *this->m_.specs[i];
    T* p = params.data() + s.offset;
    T* g = grads.data() + s.offset;
    T* m = this->m_.at(i);
    T* v = this->v_.at(i);
    const double wd = this->decayed(s) ? c.weight_decay : 0.0;
    const T decay = static_cast<T>(1.0 - lr * wd);
    parallel_for(s.numel, 32768, [&](long b, long end) {
#pragma omp simd
      for (long j = b; j < end; ++j) {
        const T gj = scaled ? g[j] * k : g[j];
        g[j] = gj;
        m[j] = lerp_torch(m[j], gj, w1);
        v[j] = lerp_torch(v[j], gj * gj, w2);
        const T u = atan2_fast(m[j] * inv_bc1, std::sqrt(v[j] * den_scale));
        if (wd > 0) p[j] = p[j] * decay;
        p[j] = p[j] + alpha * u;
      }
    });
  }
}

template class AdamAtan2<float>;
template class AdamAtan2<double>;

}  // namespace normlab
