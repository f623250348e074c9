// Muon (Jordan et al. 2024; Liu et al. 2025, "Muon is Scalable for LLM Training") with the
// semantics of torch.optim.Muon, its reference, for the hidden matrices (ParamSpec::hidden_matrix:
// the attention and MLP weights), each row block its own matrix (q, k and v of the fused wqkv; gate
// and up of a gated MLP's w_in), as modded-nanogpt and Moonlight do; AdamW for everything else
// (embeddings, LM head, norm gains, biases) at optim.muon.adamw_lr (0: optim.lr) on the same
// schedule.
// Per matrix G (A, B) = (out, in):
//   buf = lerp(buf, g, 1 - mu);  u = nesterov ? lerp(g, buf, mu) : buf
//   O = NewtonSchulz(u)                        (train/optimizers/newton_schulz.h)
//   p = p (1 - lr wd);  p -= lr s O,  s = sqrt(max(1, A / B)) (original) or 0.2 sqrt(max(A, B))
//                                        (match_rms_adamw: the update's RMS that of AdamW's)
// State: muon.momentum.<matrix param>, and adam.m./adam.v.<other param>.
#pragma once
#include "train/optimizer.h"
#include "train/optimizers/newton_schulz.h"

namespace normlab {

// [optim.muon] (the defaults are torch.optim.Muon's; declared in muon.cpp): the AdamW group's peak
// learning rate adamw_lr (0: optim.lr) on the same schedule, its weight decay, betas and eps
// optim's; the momentum mu and Nesterov; the Newton-Schulz iterations and quintic coefficients,
// X / max(||X||_F, ns_eps) before them; the learning-rate scale rule adjust_lr.
struct MuonSettings {
  double adamw_lr, momentum;
  bool nesterov;
  int ns_steps;
  double ns_a, ns_b, ns_c, ns_eps;
  MuonAdjustLr adjust_lr;
  static MuonSettings of(const OptimConfig& o);
};

template <class T>
class Muon final : public Optimizer<T> {
 public:
  Muon(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model = {});
  std::vector<StateArena<T>*> state() override { return {&mom_, &m_, &v_}; }
  static long state_elements(const ParamTable& table);
  // describe_optimizer's line (train/optimizer.h).
  static std::string describe(const ParamTable& table, const OptimConfig& cfg);
  std::vector<double> second_moment_ratio(std::span<const T> grads) const override;
  // The learning-rate scale of a (A, B) matrix under optim.muon.adjust_lr.
  static double adjust(MuonAdjustLr rule, long A, long B);
  // μP: the matrices' rule (model/mup.h: 1 with adjust_lr original), the AdamW group's as AdamW.
  double lr_multiplier(const ParamSpec& s) const override;

 protected:
  void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) override;

 private:
  const MuonSettings set_;
  StateArena<T> mom_, m_, v_;
  std::vector<T> u_;  // (largest block) the matrix Newton-Schulz orthogonalises, then its result
  NewtonSchulz<T> ns_;
};

extern template class Muon<float>;
extern template class Muon<double>;

}  // namespace normlab
