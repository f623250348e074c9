#include "train/optimizers/adamw.h"

#include <fmt/format.h>

#include "train/optimizers/adamw_kernel.h"

namespace normlab {

template <class T>
void adamw_group(const Optimizer<T>& opt, StateArena<T>& m, StateArena<T>& v, T* params, T* grads,
                 double lr, double grad_scale, long t) {
  const OptimConfig& c = opt.config();
  for (std::size_t i = 0; i < m.size(); ++i) {
    const ParamSpec& s = m.spec(i);
    const double k = opt.lr_multiplier(s);  // 1 but under μP
    adamw_update(params + s.offset, grads + s.offset, m.at(i), v.at(i), s.numel, lr * k, c.beta1,
                 c.beta2, c.eps, opt.decayed(s) ? c.weight_decay / k : 0.0, t, grad_scale);
  }
}

template <class T>
void AdamW<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  adamw_group(*this, this->m_, this->v_, params.data(), grads.data(), lr, grad_scale, this->t_);
}

template <class T>
std::string AdamW<T>::describe(const ParamTable&, const OptimConfig& c) {
  // Plain AdamW goes unsaid (the default) unless QK-Clip or a constraint is added to the line.
  if (c.qk_clip <= 0) return {};
  return fmt::format("optimizer adamw (beta2 {:g}, eps {:g})", c.beta2, c.eps);
}

template class AdamW<float>;
template class AdamW<double>;
template void adamw_group(const Optimizer<float>&, StateArena<float>&, StateArena<float>&, float*,
                          float*, double, double, long);
template void adamw_group(const Optimizer<double>&, StateArena<double>&, StateArena<double>&,
                          double*, double*, double, double, long);

}  // namespace normlab
