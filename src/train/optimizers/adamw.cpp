#include "train/optimizers/adamw.h"

#include <cmath>

#include "train/optimizers/adamw_kernel.h"

namespace normlab {

template <class T>
AdamW<T>::AdamW(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model)
    : Optimizer<T>(table, cfg, model),
      m_("adam.m.", table, [](const ParamSpec&) { return true; }),
      v_("adam.v.", table, [](const ParamSpec&) { return true; }) {}

template <class T>
long AdamW<T>::state_elements(const ParamTable& table) {
  return 2 * StateArena<T>::elements(table, [](const ParamSpec&) { return true; });
}

template <class T>
void adamw_group(const Optimizer<T>& opt, StateArena<T>& m, StateArena<T>& v, T* params, T* grads,
                 double lr, double grad_scale, long t) {
  const OptimConfig& c = opt.config();
  for (std::size_t i = 0; i < m.specs.size(); ++i) {
    const ParamSpec& s = *m.specs[i];
    adamw_update(params + s.offset, grads + s.offset, m.at(i), v.at(i), s.numel, lr, c.beta1,
                 c.beta2, c.eps, opt.decayed(s) ? c.weight_decay : 0.0, t, grad_scale);
  }
}

template <class T>
std::vector<double> AdamW<T>::second_moment_ratio(std::span<const T> grads) const {
  std::vector<double> out;
  const double bc2 = 1.0 - std::pow(this->cfg_.beta2, static_cast<double>(this->t_));
  second_moment_rms(this->table_, v_, bc2, this->cfg_.eps, grads, out);
  return out;
}

template <class T>
void AdamW<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  adamw_group(*this, m_, v_, params.data(), grads.data(), lr, grad_scale, this->t_);
}

template class AdamW<float>;
template class AdamW<double>;
template void adamw_group(const Optimizer<float>&, StateArena<float>&, StateArena<float>&, float*,
                          float*, double, double, long);
template void adamw_group(const Optimizer<double>&, StateArena<double>&, StateArena<double>&,
                          double*, double*, double, double, long);

}  // namespace normlab
