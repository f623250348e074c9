// σReparam in the Transformer (model.sigma_reparam): the weights the linear layers read (W_hat),
// the conversion of their gradients into dW and dgamma, the power-iteration step of a training
// step and the initialisation of gamma, u and v. The math is ops/sigma_reparam.h; which weights
// are reparametrized is the parameter table's SigmaSlots list (model/param_table.h).
#include "model/transformer.h"

#include "model/model_detail.h"
#include "ops/sigma_reparam.h"
#include "tensor/rng.h"

namespace normlab {

using namespace model_detail;

template <class T>
int Transformer<T>::sigma_site(long off) const {
  if (sigma_site_.empty() || off == kNone) return -1;
  return sigma_site_[spec_at(table_, off)];
}

template <class T>
const T* Transformer<T>::weight(long off) {
  const int k = sigma_site(off);
  return k < 0 ? p(off) : sigma_hat_[k];
}

template <class T>
typename Transformer<T>::WeightGrad Transformer<T>::weight_grad(long off) {
  if (sigma_site(off) < 0) return {g_raw(off), grad_accum(off)};
  return {sigma_dw_hat_, ops::Accum::overwrite};
}

template <class T>
void Transformer<T>::finish_weight_grad(long off) {
  const int k = sigma_site(off);
  if (k < 0) return;
  const SigmaSlots& ss = sigma_[k];
  const ops::Accum accum = grad_accum(ss.w);
  T* dw = g_raw(ss.w);
  T* dgamma = g(ss.gamma);
  const T* w = p(ss.w);
  const T* u = p(ss.u);
  const T* v = p(ss.v);
  const T* gamma = p(ss.gamma);
  long row0 = 0;
  for (std::size_t b = 0; b < ss.rows.size(); ++b) {
    const long at = row0 * ss.in;
    ops::sigma_reparam_backward(dw + at, dgamma + b, sigma_dw_hat_ + at, w + at, u + row0,
                                v + static_cast<long>(b) * ss.in, gamma[b],
                                sigma_val_[sigma_val_off_[k] + b], ss.rows[b], ss.in, accum);
    row0 += ss.rows[b];
  }
}

template <class T>
void Transformer<T>::sigma_refresh() {
  for (std::size_t k = 0; k < sigma_.size(); ++k) {
    const SigmaSlots& ss = sigma_[k];
    const T* w = p(ss.w);
    const T* u = p(ss.u);
    const T* v = p(ss.v);
    const T* gamma = p(ss.gamma);
    T* hat = sigma_hat_[k];
    long row0 = 0;
    for (std::size_t b = 0; b < ss.rows.size(); ++b) {
      const long at = row0 * ss.in;
      const T* vb = v + static_cast<long>(b) * ss.in;
      const double sigma = ops::sigma_estimate(u + row0, vb, w + at, ss.rows[b], ss.in);
      sigma_val_[sigma_val_off_[k] + b] = sigma;
      ops::sigma_reparam_forward(hat + at, w + at, gamma[b], sigma, ss.rows[b], ss.in);
      row0 += ss.rows[b];
    }
  }
}

template <class T>
void Transformer<T>::update_training_state() {
  for (const SigmaSlots& ss : sigma_) {
    const T* w = p(ss.w);
    T* u = p(ss.u);
    T* v = p(ss.v);
    long row0 = 0;
    for (std::size_t b = 0; b < ss.rows.size(); ++b) {
      ops::sigma_power_step(u + row0, v + static_cast<long>(b) * ss.in, w + row0 * ss.in,
                            ss.rows[b], ss.in);
      row0 += ss.rows[b];
    }
  }
}

template <class T>
void Transformer<T>::init_sigma_reparam() {
  if (params_.empty()) return;
  for (const SigmaSlots& ss : sigma_) {
    const T* w = p(ss.w);
    T* u = p(ss.u);
    T* v = p(ss.v);
    T* gamma = p(ss.gamma);
    long row0 = 0;
    for (std::size_t b = 0; b < ss.rows.size(); ++b) {
      // A fixed start, independent of the weights' seed: the iteration forgets it.
      T* vb = v + static_cast<long>(b) * ss.in;
      Rng rng(0x5157u + b);
      for (int i = 0; i < ss.in; ++i) vb[i] = static_cast<T>(rng.normal());
      gamma[b] = static_cast<T>(
          ops::sigma_power_converge(u + row0, vb, w + row0 * ss.in, ss.rows[b], ss.in));
      row0 += ss.rows[b];
    }
  }
}

#define NL_SIGMA(T)                                                                      \
  template int Transformer<T>::sigma_site(long) const;                                   \
  template const T* Transformer<T>::weight(long);                                        \
  template typename Transformer<T>::WeightGrad Transformer<T>::weight_grad(long);        \
  template void Transformer<T>::finish_weight_grad(long);                                \
  template void Transformer<T>::sigma_refresh();                                         \
  template void Transformer<T>::update_training_state();                                 \
  template void Transformer<T>::init_sigma_reparam();
NL_SIGMA(float)
NL_SIGMA(double)
#undef NL_SIGMA

}  // namespace normlab
