// StableAdamW: AdamW with per-tensor update clipping (Wortsman et al. 2023b, "Stable and
// low-precision training for large-scale vision-language models", Algorithm 2), with the
// semantics of optimi.StableAdamW (torch-optimi), its reference:
//   b1_t = b1 (1 - b1^(t-1)) / (1 - b1^t), likewise b2_t (both 0 at t = 1): debiased betas, so that
//   m and v are Adam's bias-corrected moments themselves;
//   m = lerp(m, g, 1 - b1_t);  v = b2_t v + (1 - b2_t) g^2
//   r = sqrt(mean over the tensor of g^2 / max(v, eps^2))   (RMS of g^2/v: its spike is the signal
//                                                          that precedes a loss spike)
//   lr_t = lr / max(1, r);  p = p (1 - lr_t wd);  p -= lr_t m / (sqrt(v) + eps)
// A tensor is a parameter of the table (the fused wqkv is one tensor, as in nanoGPT's c_attn).
// State: stable_adamw.m.<param>, stable_adamw.v.<param>.
#pragma once
#include "train/optimizers/two_moments.h"

namespace normlab {

template <class T>
class StableAdamW final : public TwoMoments<T> {
 public:
  StableAdamW(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model = {})
      : TwoMoments<T>(table, cfg, model, "stable_adamw.") {}
  // v is the bias-corrected moment itself (debiased betas).
  std::vector<double> second_moment_ratio(std::span<const T> grads) const override {
    return this->moment_ratio(grads, 1.0);
  }
  // describe_optimizer's line (train/optimizer.h).
  static std::string describe(const ParamTable& table, const OptimConfig& cfg);

 protected:
  void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) override;
};

extern template class StableAdamW<float>;
extern template class StableAdamW<double>;

}  // namespace normlab
