// Inference from the Transformer: logits of whole sequences (forward_logits) and incremental
// decoding with a key/value cache (forward_cached), both through the LM head's head_logits.
#include <fmt/format.h>

#include "model/transformer.h"
#include "normlab/errors.h"
#include "ops/ngpt.h"
#include "ops/softcap.h"
#include "tensor/gemm_bf16.h"

namespace normlab {

template <class T>
void Transformer<T>::forward_logits(const int* idx, int B, int Tn, T* logits) {
  sigma_refresh();
  embed(idx, B, Tn);
  body_forward(0, cfg_.n_layer);
  const long N = static_cast<long>(B) * Tn;
  if (plan_.final_norm)
    norm_forward(final_cache_, final_norm_, res_[2 * cfg_.n_layer], N, cfg_.d_model);
  head_logits(final_hidden(), N, logits);
}

template <class T>
void Transformer<T>::head_logits(const T* h, long rows, T* logits) {
  const int C = cfg_.d_model, V = cfg_.vocab_size;
  gemm_p<T>(mm_head_, false, true, static_cast<int>(rows), V, C, static_cast<T>(plan_.readout_mult),
            h, C, p(lm_head_), C, T(0), logits, V);
  if (s_z_ != kNone)
    ops::channel_scale_forward(logits, V, logits, V, p(s_z_),
                               static_cast<T>(plan_.ngpt.s_z.mult()), rows, V);
  if (cfg_.final_softcap > 0)
    ops::softcap_forward(logits, logits, rows * V, static_cast<T>(cfg_.final_softcap));
}

template <class T>
typename Transformer<T>::KvCache Transformer<T>::make_cache() const {
  KvCache c;
  const long n = static_cast<long>(cfg_.n_layer) * cfg_.seq_len * cfg_.kv_width();
  c.k.assign(n, T(0));
  c.v.assign(n, T(0));
  c.scratch.assign(static_cast<long>(cfg_.n_head) * cfg_.seq_len, T(0));
  return c;
}

template <class T>
void Transformer<T>::forward_cached(const int* idx, int n, KvCache& cache, T* last_logits) {
  if (cache.len + n > cfg_.seq_len)
    throw InputError(fmt::format("context of {} tokens exceeds model.seq_len = {}", cache.len + n,
                                 cfg_.seq_len));
  // The weights do not change while a cache fills: W_hat once, with the first tokens.
  if (cache.len == 0) sigma_refresh();
  kv_ = &cache;
  pos0_ = cache.len;
  try {
    embed(idx, 1, n);
    body_forward(0, cfg_.n_layer);
  } catch (...) {
    kv_ = nullptr;
    pos0_ = 0;
    throw;
  }
  kv_ = nullptr;
  pos0_ = 0;
  cache.len += n;
  const int C = cfg_.d_model;
  const T* last = res_[2 * cfg_.n_layer] + static_cast<long>(n - 1) * C;
  if (plan_.final_norm) {
    NormCache one{final_cache_.out, final_cache_.mean, final_cache_.rstd};
    norm_forward(one, final_norm_, last, 1, C);
    last = final_cache_.out;
  }
  head_logits(last, 1, last_logits);
}

// The members defined here (the class itself is instantiated in transformer.cpp).
#define NL_INSTANTIATE(T)                                                                  \
  template void Transformer<T>::forward_logits(const int*, int, int, T*);                  \
  template void Transformer<T>::head_logits(const T*, long, T*);                           \
  template typename Transformer<T>::KvCache Transformer<T>::make_cache() const;            \
  template void Transformer<T>::forward_cached(const int*, int, KvCache&, T*);
NL_INSTANTIATE(float)
NL_INSTANTIATE(double)
#undef NL_INSTANTIATE

}  // namespace normlab
