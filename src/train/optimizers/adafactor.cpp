#include "train/optimizers/adafactor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "config/option_keys.h"
#include "normlab/errors.h"
#include "tensor/chunked_sum.h"
#include "train/optimizers/adamw_kernel.h"  // sum_squares
#include "train/optimizers/lerp.h"

namespace normlab {

namespace {

namespace check = keytab::check;
namespace resume = keytab::resume;

// [optim.adafactor] (torch.optim.Adafactor's defaults): 1 - beta2_t = t^beta2_decay; eps1 bounds
// the second moment from below (0: the machine epsilon, torch's None); eps2 the parameter scale
// of the relative step; d the update clipping threshold.
const OptionKey<double> kBeta2Decay{"adafactor", "beta2_decay", -0.8, resume::moments,
                                    "optim.adafactor_beta2_decay",
                                    check::at_most(0.0, "(as torch.optim.Adafactor)")};
const OptionKey<double> kEps1{"adafactor", "eps1", 0.0, resume::resumable, "optim.adafactor_eps1",
                              check::non_negative()};
const OptionKey<double> kEps2{"adafactor", "eps2", 1e-3, resume::resumable,
                              "optim.adafactor_eps2", check::non_negative()};
const OptionKey<double> kD{"adafactor", "d", 1.0, resume::resumable, "optim.adafactor_d",
                           check::at_least(1.0)};

bool factored(const ParamSpec& s) { return s.shape.size() >= 2; }
bool unfactored(const ParamSpec& s) { return s.shape.size() < 2; }

// (..., A) and (..., B) of a (..., A, B) parameter: the mean of g^2 over its last dimension, and
// over the one before.
std::vector<std::int64_t> row_shape(const ParamSpec& s) {
  return {s.shape.begin(), s.shape.end() - 1};
}
std::vector<std::int64_t> col_shape(const ParamSpec& s) {
  std::vector<std::int64_t> d(s.shape.begin(), s.shape.end() - 2);
  d.push_back(s.shape.back());
  return d;
}

// torch's eps[0]: optim.adafactor.eps1, or the machine epsilon of T when 0 (torch's None).
template <class T>
double eps1_of(const OptimConfig& c) {
  return kEps1(c) > 0 ? kEps1(c) : std::numeric_limits<T>::epsilon();
}

}  // namespace

template <class T>
Adafactor<T>::Adafactor(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model)
    : Optimizer<T>(table, cfg, model),
      row_("adafactor.row_var.", table, factored, row_shape),
      col_("adafactor.col_var.", table, factored, col_shape),
      var_("adafactor.variance.", table, unfactored) {
  long max_b = 0, max_batch = 0;
  for (const StateEntry& e : col_.entries) {
    const ParamSpec& s = *e.param;
    max_b = std::max<long>(max_b, s.shape.back());
    max_batch = std::max<long>(max_batch, s.numel / (s.shape.back() * s.shape[s.shape.size() - 2]));
  }
  col_sums_.resize(max_b);
  den_.resize(max_batch);
}

template <class T>
long Adafactor<T>::state_elements(const ParamTable& table) {
  return StateArena<T>::elements(table, factored, row_shape) +
         StateArena<T>::elements(table, factored, col_shape) +
         StateArena<T>::elements(table, unfactored);
}

template <class T>
std::string Adafactor<T>::describe(const ParamTable& table, const OptimConfig& c) {
  long mats = 0, others = 0;
  for (const ParamSpec& p : table.specs())
    if (p.trained) ++(factored(p) ? mats : others);
  return fmt::format(
      "optimizer adafactor: factored second moments on {} matrices, full on {} "
      "tensors (beta2_decay {:g}, eps1 {}, eps2 {:g}, d {:g})",
      mats, others, kBeta2Decay(c), kEps1(c) > 0 ? fmt::format("{:g}", kEps1(c)) : "machine",
      kEps2(c), kD(c));
}

template <class T>
std::vector<double> Adafactor<T>::second_moment_ratio(std::span<const T> grads) const {
  const std::vector<ParamSpec>& specs = this->table_.specs();
  std::vector<double> out(specs.size(), std::nan(""));
  const double e1 = eps1_of<T>(this->cfg_);
  const double e1sq = e1 * e1;
  for (std::size_t k = 0; k < var_.size(); ++k) {
    const ParamSpec& s = var_.spec(k);
    const T* g = grads.data() + s.offset;
    const T* v = var_.at(k);
    double sum = 0;
    for (long j = 0; j < s.numel; ++j)
      sum += static_cast<double>(g[j]) * g[j] / std::max(static_cast<double>(v[j]), e1sq);
    out[static_cast<std::size_t>(&s - specs.data())] =
        std::sqrt(sum / static_cast<double>(s.numel));
  }
  for (std::size_t k = 0; k < row_.size(); ++k) {
    const ParamSpec& s = row_.spec(k);
    const long B = s.shape.back(), A = s.shape[s.shape.size() - 2], nb = s.numel / (A * B);
    const T* g = grads.data() + s.offset;
    double sum = 0;
    for (long q = 0; q < nb; ++q) {
      const T* R = row_.at(k) + q * A;
      const T* C = col_.at(k) + q * B;
      double rsum = 0;
      for (long i = 0; i < A; ++i) rsum += R[i];
      const double den = std::max(rsum / static_cast<double>(A), e1);
      for (long i = 0; i < A; ++i)
        for (long j = 0; j < B; ++j) {
          const double gij = g[(q * A + i) * B + j];
          sum += gij * gij / std::max(static_cast<double>(R[i]) * C[j] / den, e1sq);
        }
    }
    out[static_cast<std::size_t>(&s - specs.data())] =
        std::sqrt(sum / static_cast<double>(s.numel));
  }
  return out;
}

template <class T>
void Adafactor<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  const OptimConfig& c = this->cfg_;
  const double t = static_cast<double>(this->t_);
  const T w = static_cast<T>(std::pow(t, kBeta2Decay(c)));  // 1 - beta2_t
  const double eps1 = eps1_of<T>(c), eps2 = kEps2(c), d = kD(c);
  const T e1 = static_cast<T>(eps1), e1sq = static_cast<T>(eps1 * eps1);
  const T k = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0;
  std::size_t im = 0, iv = 0;  // the next entry of row_ / col_ and of var_
  for (const ParamSpec& s : this->table_.specs()) {
    if (!s.trained) continue;
    const long n = s.numel;
    T* p = params.data() + s.offset;
    T* g = grads.data() + s.offset;
    const double mult = this->lr_multiplier(s);  // 1 but under μP
    const double lr_s = lr * mult;
    const double rho = std::min(lr_s, 1.0 / std::sqrt(t));
    const double rms_p =
        rounded<T>(std::sqrt(sum_squares(p, n))) / std::sqrt(static_cast<double>(n));
    const double alpha = std::max(eps2, rms_p) * rho;
    const double wd = this->decayed(s) ? c.weight_decay / mult : 0.0;
    const T decay = static_cast<T>(1.0 - lr_s * wd);
    if (scaled)
      parallel_for(n, 32768, [&](long b, long e) {
        for (long j = b; j < e; ++j) g[j] *= k;
      });

    // The update's scale once sum(U^2) is known: -alpha / max(1, RMS(U) / d).
    const auto step_of = [&](double sum_u2) {
      const double rms_d =
          rounded<T>(std::sqrt(sum_u2)) / (std::sqrt(static_cast<double>(n)) * d);
      return static_cast<T>(-alpha / std::max(1.0, rms_d));
    };
    if (!factored(s)) {
      NL_CHECK(iv < var_.size() && &var_.spec(iv) == &s, "Adafactor: no state for {}", s.name);
      T* v = var_.at(iv++);
      const double sum_u2 = chunked_sum(n, 32768, [&](long b, long e) {
        double acc = 0;
        for (long j = b; j < e; ++j) {
          v[j] = lerp_torch(v[j], g[j] * g[j], w);
          const T u = T(1) / std::sqrt(std::max(v[j], e1sq)) * g[j];
          acc += static_cast<double>(u) * u;
        }
        return acc;
      });
      const T step = step_of(sum_u2);
      parallel_for(n, 32768, [&](long b, long e) {
        for (long j = b; j < e; ++j)
          p[j] = std::fma(step, T(1) / std::sqrt(std::max(v[j], e1sq)) * g[j], p[j] * decay);
      });
      continue;
    }

    NL_CHECK(im < row_.size() && &row_.spec(im) == &s, "Adafactor: no state for {}", s.name);
    const long B = s.shape.back(), A = s.shape[s.shape.size() - 2], nb = n / (A * B);
    T* R = row_.at(im);  // (nb, A)
    T* C = col_.at(im);  // (nb, B)
    ++im;
    T* den = den_.data();  // (nb) max(mean_i R, eps1) of each matrix
    const long row_grain = std::max<long>(1, 32768 / B), col_grain = std::max<long>(16, 32768 / A);
    // U of row i of matrix q into its sum of squares (pass == 0) or the parameter (pass == 1).
    const auto rows = [&](long q, long b, long e, int pass, T step) {
      const T* Rq = R + q * A;
      const T* Cq = C + q * B;
      double acc = 0;
      for (long i = b; i < e; ++i) {
        const T* gi = g + (q * A + i) * B;
        T* pi = p + (q * A + i) * B;
        for (long j = 0; j < B; ++j) {
          const T v = Rq[i] * Cq[j] / den[q];
          const T u = T(1) / std::sqrt(std::max(v, e1sq)) * gi[j];
          if (pass == 0)
            acc += static_cast<double>(u) * u;
          else
            pi[j] = std::fma(step, u, pi[j] * decay);
        }
      }
      return acc;
    };
    double sum_u2 = 0;
    for (long q = 0; q < nb; ++q) {
      const T* gq = g + q * A * B;
      T* Rq = R + q * A;
      T* Cq = C + q * B;
      parallel_for(A, row_grain, [&](long b, long e) {
        for (long i = b; i < e; ++i) {
          double ss = 0;
          for (long j = 0; j < B; ++j) ss += static_cast<double>(gq[i * B + j]) * gq[i * B + j];
          const T nrm = static_cast<T>(std::sqrt(ss));
          Rq[i] = lerp_torch(Rq[i], nrm * nrm / static_cast<T>(B), w);
        }
      });
      double* cs = col_sums_.data();
      parallel_for(B, col_grain, [&](long b, long e) {
        std::fill(cs + b, cs + e, 0.0);
        for (long i = 0; i < A; ++i)
          for (long j = b; j < e; ++j) cs[j] += static_cast<double>(gq[i * B + j]) * gq[i * B + j];
        for (long j = b; j < e; ++j) {
          const T nrm = static_cast<T>(std::sqrt(cs[j]));
          Cq[j] = lerp_torch(Cq[j], nrm * nrm / static_cast<T>(A), w);
        }
      });
      double rsum = 0;
      for (long i = 0; i < A; ++i) rsum += Rq[i];
      den[q] = std::max(static_cast<T>(rsum / static_cast<double>(A)), e1);
      sum_u2 += chunked_sum(A, row_grain, [&](long b, long e) { return rows(q, b, e, 0, T(0)); });
    }
    const T step = step_of(sum_u2);
    for (long q = 0; q < nb; ++q)
      parallel_for(A, row_grain, [&](long b, long e) { rows(q, b, e, 1, step); });
  }
}

template class Adafactor<float>;
template class Adafactor<double>;

}  // namespace normlab
