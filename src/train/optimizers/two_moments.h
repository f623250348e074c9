// The state of the element-wise Adam family (AdamW, StableAdamW, Adam-atan2): a first and a second
// moment for every parameter, saved as <prefix>m.<param> and <prefix>v.<param>, and the diagnostics
// ratio RMS(g^2 / v_hat) they share.
#pragma once
#include <cmath>
#include <string>

#include "train/optimizer.h"

namespace normlab {

template <class T>
class TwoMoments : public Optimizer<T> {
 public:
  TwoMoments(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model,
             const std::string& prefix)
      : Optimizer<T>(table, cfg, model),
        m_(prefix + "m.", table, every),
        v_(prefix + "v.", table, every) {}
  std::vector<StateArena<T>*> state() override { return {&m_, &v_}; }
  static long state_elements(const ParamTable& table) {
    return 2 * StateArena<T>::elements(table, every);
  }

 protected:
  // RMS(g^2 / max(v / bc2, eps^2)) per parameter (bc2 = 1 when v is bias-corrected already).
  std::vector<double> moment_ratio(std::span<const T> grads, double bc2) const {
    std::vector<double> out;
    second_moment_rms(this->table_, v_, bc2, this->cfg_.eps, grads, out);
    return out;
  }
  // Adam's 1 - beta2^t at the current step.
  double bias_correction2() const {
    return 1.0 - std::pow(this->cfg_.beta2, static_cast<double>(this->t_));
  }
  static bool every(const ParamSpec&) { return true; }
  StateArena<T> m_, v_;
};

}  // namespace normlab
