#include "train/qk_clip.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "normlab/errors.h"

namespace normlab {

namespace {

const ParamSpec* need(const ParamTable& t, const std::string& name) {
  const ParamSpec* s = t.find(name);
  NL_CHECK(s != nullptr, "QK-Clip: the model has no parameter '{}'", name);
  return s;
}

// x[0, n) *= f
template <class T>
void scale(T* x, long n, double f) {
  const T k = static_cast<T>(f);
  for (long i = 0; i < n; ++i) x[i] *= k;
}

// The effective gain (offset + w) scaled by f: w = (offset + w) f - offset.
template <class T>
void scale_gain(T* w, long n, double f, double offset) {
  if (offset == 0) return scale(w, n, f);
  for (long i = 0; i < n; ++i)
    w[i] = static_cast<T>((offset + static_cast<double>(w[i])) * f - offset);
}

}  // namespace

QkClip::QkClip(const ParamTable& table, const ModelConfig& m, double tau, double alpha)
    : H_(m.n_head), Hkv_(m.kv_heads()), D_(m.head_size()), Cq_(m.q_width()),
      qk_norm_(m.qk_norm != QKNormKind::none), full_scope_(m.qk_norm_scope == QKNormScope::full),
      gain_offset_(m.norm_gain_offset), tau_(tau), alpha_(alpha) {
  for (int l = 0; l < m.n_layer; ++l) {
    const std::string a = fmt::format("blocks.{}.attn.", l);
    Layer L;
    L.wqkv = need(table, a + "wqkv.weight");
    L.bqkv = table.find(a + "wqkv.bias");
    if (qk_norm_) {
      L.q_gain = need(table, a + "q_norm.weight");
      L.k_gain = need(table, a + "k_norm.weight");
      L.q_bias = table.find(a + "q_norm.bias");
      L.k_bias = table.find(a + "k_norm.bias");
    }
    layers_.push_back(L);
  }
  events_.per_layer.assign(layers_.size(), 0);
  gq_.resize(H_);
  gk_.resize(Hkv_);
}

template <class T>
void QkClip::apply(T* params, std::span<const double> S) {
  NL_CHECK(static_cast<long>(S.size()) == static_cast<long>(layers_.size()) * H_,
           "QK-Clip: {} attention maxima for {} layers of {} heads", S.size(), layers_.size(), H_);
  events_.heads_clipped = 0;
  events_.max_logit = 0;
  const int G = H_ / Hkv_;
  const long C = layers_.empty() ? 0 : layers_[0].wqkv->shape[1];
  std::vector<double>& gq = gq_;
  std::vector<double>& gk = gk_;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const double* s = S.data() + l * H_;
    int clipped = 0;
    for (int h = 0; h < H_; ++h) {
      events_.max_logit = std::max(events_.max_logit, s[h]);
      gq[h] = s[h] > tau_ ? tau_ / s[h] : 1.0;
      clipped += s[h] > tau_;
    }
    for (int k = 0; k < Hkv_; ++k) {
      double worst = 0;
      for (int h = k * G; h < (k + 1) * G; ++h) worst = std::max(worst, s[h]);
      gk[k] = worst > tau_ ? tau_ / worst : 1.0;
    }
    events_.per_layer[l] = clipped;
    events_.heads_clipped += clipped;
    if (clipped == 0) continue;
    // Factor of query head h and of key head k.
    const auto fq = [&](int h) { return std::pow(gq[h], alpha_); };
    const auto fk = [&](int k) { return std::pow(gk[k], 1.0 - alpha_); };
    if (!qk_norm_) {
      T* w = params + L.wqkv->offset;
      T* b = L.bqkv ? params + L.bqkv->offset : nullptr;
      for (int h = 0; h < H_; ++h) {
        if (gq[h] == 1.0) continue;
        scale(w + static_cast<long>(h) * D_ * C, D_ * C, fq(h));
        if (b) scale(b + static_cast<long>(h) * D_, D_, fq(h));
      }
      for (int k = 0; k < Hkv_; ++k) {
        if (gk[k] == 1.0) continue;
        const long row = Cq_ + static_cast<long>(k) * D_;
        scale(w + row * C, D_ * C, fk(k));
        if (b) scale(b + row, D_, fk(k));
      }
      continue;
    }
    // QK-Norm: the gains (and biases) of the norms set the scale of q and k.
    const auto rescale = [&](const ParamSpec* gain, const ParamSpec* bias, long i0, long n,
                             double f) {
      scale_gain(params + gain->offset + i0, n, f, gain_offset_);
      if (bias) scale(params + bias->offset + i0, n, f);
    };
    if (full_scope_) {
      for (int h = 0; h < H_; ++h)
        if (gq[h] != 1.0) rescale(L.q_gain, L.q_bias, static_cast<long>(h) * D_, D_, fq(h));
      for (int k = 0; k < Hkv_; ++k)
        if (gk[k] != 1.0) rescale(L.k_gain, L.k_bias, static_cast<long>(k) * D_, D_, fk(k));
    } else {
      const double q_min = *std::min_element(gq.begin(), gq.end());
      const double k_min = *std::min_element(gk.begin(), gk.end());
      rescale(L.q_gain, L.q_bias, 0, D_, std::pow(q_min, alpha_));
      rescale(L.k_gain, L.k_bias, 0, D_, std::pow(k_min, 1.0 - alpha_));
    }
  }
}

template void QkClip::apply(float*, std::span<const double>);
template void QkClip::apply(double*, std::span<const double>);

}  // namespace normlab
