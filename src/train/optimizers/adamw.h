// AdamW (Loshchilov & Hutter 2019) with PyTorch's semantics (torch.optim.AdamW), the default.
// State: adam.m.<param>, adam.v.<param> (first and second moments, not bias-corrected).
#pragma once
#include "train/optimizers/two_moments.h"

namespace normlab {

template <class T>
class AdamW final : public TwoMoments<T> {
 public:
  AdamW(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model = {})
      : TwoMoments<T>(table, cfg, model, "adam.") {}
  std::vector<double> second_moment_ratio(std::span<const T> grads) const override {
    return this->moment_ratio(grads, this->bias_correction2());
  }
  // describe_optimizer's line (train/optimizer.h).
  static std::string describe(const ParamTable& table, const OptimConfig& cfg);
  // The moments, laid out as the parameter table (offset = ParamSpec::offset).
  std::vector<T>& m() { return this->m_.data; }
  std::vector<T>& v() { return this->v_.data; }
  const std::vector<T>& m() const { return this->m_.data; }
  const std::vector<T>& v() const { return this->v_.data; }

 protected:
  void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) override;
};

// The AdamW update of the parameters that arenas m and v cover (a group of a larger optimizer:
// Muon's embeddings, head, gains and biases), at step t.
template <class T>
void adamw_group(const Optimizer<T>& opt, StateArena<T>& m, StateArena<T>& v, T* params, T* grads,
                 double lr, double grad_scale, long t);

extern template class AdamW<float>;
extern template class AdamW<double>;

}  // namespace normlab
