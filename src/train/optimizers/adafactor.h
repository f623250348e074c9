// Adafactor (Shazeer & Stern 2018, "Adafactor: Adaptive Learning Rates with Sublinear Memory
// Cost") with the semantics of torch.optim.Adafactor, its reference, on every parameter of the
// table (a tensor is a parameter: the fused wqkv is one matrix, as in torch over nanoGPT's
// c_attn). At step t, with lr the schedule's learning rate (times μP's multiplier):
//   w = t^beta2_decay  (= 1 - beta2_t);  rho = min(lr, 1 / sqrt(t))
//   alpha = max(eps2, RMS(p)) rho                 (RMS of the parameter before the decay)
//   p = p (1 - lr wd)
//   matrix (dim >= 2, factored over its last two dimensions (A, B), batched over the others):
//     R = lerp(R, mean_j g^2, w)  (A);  C = lerp(C, mean_i g^2, w)  (B)
//     V = R C^T / max(mean_i R, eps1)
//   vector (dim <= 1):  V = lerp(V, g^2, w)
//   U = g / sqrt(max(V, eps1^2));  p -= alpha U / max(1, RMS(U) / d)
// eps1 = optim.adafactor.eps1 (0: the machine epsilon of the parameter's type, torch's None),
// eps2 = optim.adafactor.eps2, d = optim.adafactor.d, beta2_decay = optim.adafactor.beta2_decay
// ([optim.adafactor], torch.optim.Adafactor's defaults, declared in adafactor.cpp),
// wd = optim.weight_decay where the parameter decays (Optimizer::decayed). No first moment, no
// bias correction: w = 1 at t = 1.
// State, none of it parameter-shaped for a matrix: adafactor.row_var.<param> (A),
// adafactor.col_var.<param> (B) (with the batch dimensions in front, for a parameter of more
// than two), adafactor.variance.<param> (the parameter's shape) for a vector.
#pragma once
#include <string>
#include <vector>

#include "train/optimizer.h"

namespace normlab {

template <class T>
class Adafactor final : public Optimizer<T> {
 public:
  Adafactor(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model = {});
  std::vector<StateArena<T>*> state() override { return {&row_, &col_, &var_}; }
  static long state_elements(const ParamTable& table);
  // describe_optimizer's line (train/optimizer.h).
  static std::string describe(const ParamTable& table, const OptimConfig& cfg);
  // RMS(g^2 / max(V, eps1^2)) per tensor, V the estimate of the last update (factored for a
  // matrix): RMS(U), the value the update is clipped by when it exceeds d.
  std::vector<double> second_moment_ratio(std::span<const T> grads) const override;

 protected:
  void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) override;

 private:
  StateArena<T> row_, col_, var_;
  std::vector<double> col_sums_;  // (largest B) a matrix's column sums of g^2
  std::vector<T> den_;            // (largest batch) max(mean_i R, eps1) of each matrix
};

extern template class Adafactor<float>;
extern template class Adafactor<double>;

}  // namespace normlab
