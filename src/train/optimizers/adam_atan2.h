// Adam-atan2 (Everett et al. 2024, "Scaling Exponents Across Parameterizations and Optimizers"):
// Adam without epsilon, the division replaced by atan2, with the semantics of
// adam_atan2_pytorch.AdamAtan2, its reference:
//   m = lerp(m, g, 1 - b1);  v = lerp(v, g^2, 1 - b2)
//   u = atan2(m / (1 - b1^t), b sqrt(v / (1 - b2^t)))
//   p = p (1 - lr wd);  p -= lr a u          (a = optim.adam_atan2.a, b = optim.adam_atan2.b:
//                                             [optim.adam_atan2], declared in adam_atan2.cpp)
// |u| < pi/2 always, and u ~ m_hat / (b sqrt(v_hat)) where that is small: no epsilon to tune.
// State: adam_atan2.m.<param>, adam_atan2.v.<param>.
#pragma once
#include "train/optimizers/two_moments.h"

namespace normlab {

template <class T>
class AdamAtan2 final : public TwoMoments<T> {
 public:
  AdamAtan2(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model = {})
      : TwoMoments<T>(table, cfg, model, "adam_atan2.") {}
  std::vector<double> second_moment_ratio(std::span<const T> grads) const override {
    return this->moment_ratio(grads, this->bias_correction2());
  }
  // describe_optimizer's line (train/optimizer.h).
  static std::string describe(const ParamTable& table, const OptimConfig& cfg);

 protected:
  void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) override;
};

extern template class AdamAtan2<float>;
extern template class AdamAtan2<double>;

}  // namespace normlab
