#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "train/adamw.h"

namespace normlab {

template <class T>
AdamW<T>::AdamW(const ParamTable& table, const OptimConfig& cfg)
    : table_(table), cfg_(cfg), m_(table.total(), T(0)), v_(table.total(), T(0)) {}

template <class T>
bool AdamW<T>::decayed(const ParamSpec& s) const {
  if (!s.decay) return false;
  if (s.group == ParamGroup::embedding) return cfg_.decay_embeddings;
  return true;
}

template <class T>
double gradient_norm(const ParamTable& table, std::span<const T> grads) {
  double ss = 0;
  for (const ParamSpec& s : table.specs()) ss += sum_squares(grads.data() + s.offset, s.numel);
  return std::sqrt(ss);
}
template double gradient_norm<float>(const ParamTable&, std::span<const float>);
template double gradient_norm<double>(const ParamTable&, std::span<const double>);

double clip_scale(double grad_clip, double grad_norm) {
  return grad_clip > 0 ? std::min(1.0, grad_clip / (grad_norm + 1e-6)) : 1.0;
}

template <class T>
void AdamW<T>::update(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  ++t_;
  for (const ParamSpec& s : table_.specs())
    adamw_update(params.data() + s.offset, grads.data() + s.offset, m_.data() + s.offset,
                 v_.data() + s.offset, s.numel, lr, cfg_.beta1, cfg_.beta2, cfg_.eps,
                 decayed(s) ? cfg_.weight_decay : 0.0, t_, grad_scale);
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace normlab
