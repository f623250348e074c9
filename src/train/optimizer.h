// The optimizer: AdamW over the parameter table. Its moment arenas share the parameter table's
// offsets; which tensors are decayed comes from the table. Gradient clipping is decided by the step
// that computes the gradient norm (train/step.h: StepResult::clip_scale, from clip_scale below);
// the optimizer receives that factor and applies it in its own pass over the gradients.
#pragma once
#include <span>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"

namespace normlab {

// Global L2 norm of a gradient arena, summed tensor by tensor over the parameter table.
template <class T>
double gradient_norm(const ParamTable& table, std::span<const T> grads);

// Global-norm clipping as torch.nn.utils.clip_grad_norm_: the gradients are to be scaled by
// min(1, grad_clip / (grad_norm + 1e-6)); 1 when grad_clip <= 0 (off).
double clip_scale(double grad_clip, double grad_norm);

template <class T>
class AdamW {
 public:
  AdamW(const ParamTable& table, const OptimConfig& cfg);
  // One AdamW update at learning rate lr with the gradients grad_scale * grads (grad_scale: the
  // clip factor, clip_scale()). The scaled gradients are written back, as in-place clipping
  // leaves them, in the same pass over memory as the update: the optimizer is bound by memory
  // bandwidth on large models, and a separate clipping pass would read and write them once more.
  void update(std::span<T> params, std::span<T> grads, double lr, double grad_scale = 1.0);
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }
  std::vector<T>& m() { return m_; }
  std::vector<T>& v() { return v_; }
  const std::vector<T>& m() const { return m_; }
  const std::vector<T>& v() const { return v_; }
  bool decayed(const ParamSpec& s) const;

 private:
  const ParamTable& table_;
  OptimConfig cfg_;
  std::vector<T> m_, v_;
  long t_ = 0;
};

extern template class AdamW<float>;
extern template class AdamW<double>;

}  // namespace normlab
