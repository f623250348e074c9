// The optimizer: AdamW over the parameter table, with global-norm clipping. Its moment arenas share
// the parameter table's offsets; which tensors are decayed comes from the table.
#pragma once
#include <span>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"

namespace normlab {

// Global L2 norm of a gradient arena, summed tensor by tensor over the parameter table.
template <class T>
double gradient_norm(const ParamTable& table, std::span<const T> grads);

template <class T>
class AdamW {
 public:
  AdamW(const ParamTable& table, const OptimConfig& cfg);
  // Clips the gradients in place when cfg.grad_clip > 0, then applies one AdamW update at
  // learning rate lr. Returns the global gradient norm before clipping.
  double step(std::span<T> params, std::span<T> grads, double lr);
  // The same, given grad_norm(grads) of these very gradients (a caller that has computed it
  // already saves a pass over them). Returns it.
  double step(std::span<T> params, std::span<T> grads, double lr, double grad_norm);
  // Global L2 norm of the gradients.
  double grad_norm(std::span<const T> grads) const;
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
