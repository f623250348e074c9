#include "train/optimizers/soap.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>

#include <fmt/format.h>

#include "config/option_keys.h"
#include "normlab/errors.h"
#include "tensor/chunked_sum.h"
#include "tensor/gemm.h"
#include "train/optimizers/lerp.h"

// LAPACK (OpenBLAS exports the Fortran symbols; Debian ships no LAPACKE header with it). The
// trailing size_t arguments are gfortran's hidden lengths of the character arguments.
extern "C" {
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
             double* w, double* work, const int* lwork, int* iwork, const int* liwork, int* info,
             std::size_t, std::size_t);
void sgeqrf_(const int* m, const int* n, float* a, const int* lda, float* tau, float* work,
             const int* lwork, int* info);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void sorgqr_(const int* m, const int* n, const int* k, float* a, const int* lda, const float* tau,
             float* work, const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda,
             const double* tau, double* work, const int* lwork, int* info);
}

namespace normlab {

namespace {

// Eigenvalues (ascending) and eigenvectors (the columns of a, column-major) of the symmetric
// (n, n) a. 'U' of a row-major matrix is the lower triangle torch.linalg.eigh reads.
int syevd(int n, double* a, double* w, double* work, int lwork, int* iwork, int liwork) {
  int info = 0;
  dsyevd_("V", "U", &n, a, &n, w, work, &lwork, iwork, &liwork, &info, 1, 1);
  return info;
}
// The Q of the QR decomposition of the column-major (n, n) a, in place (torch.linalg.qr's
// reduced mode: geqrf, then orgqr).
int qr_q(int n, float* a, float* tau, float* work, int lwork) {
  int info = 0;
  sgeqrf_(&n, &n, a, &n, tau, work, &lwork, &info);
  if (info == 0) sorgqr_(&n, &n, &n, a, &n, tau, work, &lwork, &info);
  return info;
}
int qr_q(int n, double* a, double* tau, double* work, int lwork) {
  int info = 0;
  dgeqrf_(&n, &n, a, &n, tau, work, &lwork, &info);
  if (info == 0) dorgqr_(&n, &n, &n, a, &n, tau, work, &lwork, &info);
  return info;
}
// syevd's workspace for jobz = 'V' (LAPACK's stated minimum); QR's, with room for its blocking.
long eig_work(long n) { return 1 + 6 * n + 2 * n * n; }
long eig_iwork(long n) { return 3 + 5 * n; }
long qr_work(long n) { return 64 * n; }

bool matrix(const ParamSpec& s) { return s.shape.size() == 2; }
// (A, A) and (B, B) of an (A, B) matrix whose side is at most max_dim long.
std::function<bool(const ParamSpec&)> left_side(long max_dim) {
  return [max_dim](const ParamSpec& s) { return matrix(s) && s.shape[0] <= max_dim; };
}
std::function<bool(const ParamSpec&)> right_side(long max_dim) {
  return [max_dim](const ParamSpec& s) { return matrix(s) && s.shape[1] <= max_dim; };
}
std::vector<std::int64_t> left_shape(const ParamSpec& s) { return {s.shape[0], s.shape[0]}; }
std::vector<std::int64_t> right_shape(const ParamSpec& s) { return {s.shape[1], s.shape[1]}; }
bool every(const ParamSpec&) { return true; }

namespace check = keytab::check;
namespace resume = keytab::resume;

// [optim.soap] (pytorch_optimizer.SOAP's defaults)
const OptionKey<double> kShampooBeta{"soap", "shampoo_beta", -1.0, resume::moments,
                                     "optim.soap_shampoo_beta",
                                     check::less_than(1.0, "(< 0: optim.beta2)")};
const OptionKey<int> kFrequency{"soap", "precondition_frequency", 10, resume::resumable,
                                "optim.soap_precondition_frequency", check::positive()};
const OptionKey<int> kMaxPrecondDim{"soap", "max_precond_dim", 10000, resume::optimizer,
                                    "optim.soap_max_precond_dim", check::positive()};
const OptionKey<bool> kNormalizeGrads{"soap", "normalize_grads", false, resume::resumable,
                                      "optim.soap_normalize_grads"};
const OptionKey<bool> kCorrectBias{"soap", "correct_bias", true, resume::resumable,
                                   "optim.soap_correct_bias"};

double shampoo_beta(const OptimConfig& c) {
  return kShampooBeta(c) < 0 ? c.beta2 : kShampooBeta(c);
}

}  // namespace

template <class T>
Soap<T>::Soap(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model)
    : Optimizer<T>(table, cfg, model),
      m_("soap.exp_avg.", table, every),
      v_("soap.exp_avg_sq.", table, every),
      l_("soap.L.", table, left_side(kMaxPrecondDim(cfg)), left_shape),
      ql_("soap.Q_L.", table, left_side(kMaxPrecondDim(cfg)), left_shape),
      r_("soap.R.", table, right_side(kMaxPrecondDim(cfg)), right_shape),
      qr_("soap.Q_R.", table, right_side(kMaxPrecondDim(cfg)), right_shape) {
  long max_numel = 0, max_n = 0;
  for (const ParamSpec& s : table.specs()) {
    if (!s.trained) continue;
    if (s.shape.size() > 2)
      throw InputError(fmt::format("[soap] parameter '{}' has {} dimensions; SOAP here takes "
                                   "vectors and matrices",
                                   s.name, s.shape.size()));
    const bool l = left_side(kMaxPrecondDim(cfg))(s);
    const bool r = right_side(kMaxPrecondDim(cfg))(s);
    if (l) max_n = std::max<long>(max_n, s.shape[0]);
    if (r) max_n = std::max<long>(max_n, s.shape[1]);
    if (l || r) max_numel = std::max(max_numel, s.numel);
  }
  s1_.resize(max_numel);
  s2_.resize(max_numel);
  sq_.resize(max_n * max_n);
  est_.resize(max_n);
  order_.resize(max_n);
  tau_.resize(max_n);
  work_.resize(qr_work(max_n));
  eig_a_.resize(max_n * max_n);
  eig_w_.resize(max_n);
  eig_work_.resize(eig_work(max_n));
  eig_iwork_.resize(eig_iwork(max_n));
}

template <class T>
long Soap<T>::state_elements(const ParamTable& table, const OptimConfig& c) {
  const long d = kMaxPrecondDim(c);
  return 2 * StateArena<T>::elements(table, every) +
         2 * StateArena<T>::elements(table, left_side(d), left_shape) +
         2 * StateArena<T>::elements(table, right_side(d), right_shape);
}

template <class T>
std::string Soap<T>::describe(const ParamTable& table, const OptimConfig& c) {
  long mats = 0, sides = 0, identity = 0, others = 0;
  for (const ParamSpec& s : table.specs()) {
    if (!s.trained) continue;
    if (!matrix(s)) {
      ++others;
      continue;
    }
    ++mats;
    for (const std::int64_t d : s.shape) ++(d <= kMaxPrecondDim(c) ? sides : identity);
  }
  return fmt::format(
      "optimizer soap: Adam in Shampoo's eigenbasis on {} matrices ({} sides preconditioned, {} "
      "longer than max_precond_dim {} left in place), Adam on {} tensors (shampoo_beta {:g}, "
      "eigenbasis every {} steps{}{})",
      mats, sides, identity, kMaxPrecondDim(c), others, shampoo_beta(c),
      kFrequency(c), kCorrectBias(c) ? "" : ", no bias correction",
      kNormalizeGrads(c) ? ", normalized updates" : "");
}

template <class T>
void Soap<T>::eigenbasis(const T* S, long n, T* Q) {
  // torch.linalg.eigh(S + 1e-30 I), its columns reversed (decreasing eigenvalue), computed in
  // float64 (the reference's own fallback) and rounded to T: OpenBLAS's float32 syevd gave
  // eigenvectors several times farther from the float64 ones than torch's float32 eigh, which
  // the first update (the sign of the gradient in the eigenbasis, where Adam starts) amplifies
  // (tests/py/test_soap_parity.py). It runs once, on the first step.
  double* a = eig_a_.data();
  std::copy(S, S + n * n, a);
  for (long i = 0; i < n; ++i) a[i * n + i] = S[i * n + i] + static_cast<T>(1e-30);  // in T
  const int info =
      syevd(static_cast<int>(n), a, eig_w_.data(), eig_work_.data(),
            static_cast<int>(eig_work_.size()), eig_iwork_.data(),
            static_cast<int>(eig_iwork_.size()));
  NL_CHECK(info == 0, "[soap] the eigendecomposition of a ({}, {}) statistic failed (info {})", n,
           n, info);
  for (long r = 0; r < n; ++r)
    for (long c = 0; c < n; ++c) Q[r * n + c] = static_cast<T>(a[r + (n - 1 - c) * n]);
}

template <class T>
void Soap<T>::power_iteration(const T* S, long n, T* Q, T* v, long A, long B, int dim) {
  // P = S Q; est_j = (Q^T S Q)_jj, summed as torch's (Q * P).sum(0) returns it
  T* P = sq_.data();
  const int ni = static_cast<int>(n);
  gemm<T>(false, false, ni, ni, ni, T(1), S, ni, Q, ni, T(0), P, ni);
  std::fill(est_.begin(), est_.begin() + n, 0.0);
  for (long i = 0; i < n; ++i)
    for (long j = 0; j < n; ++j) est_[j] += static_cast<double>(Q[i * n + j]) * P[i * n + j];
  for (long j = 0; j < n; ++j) est_[j] = rounded<T>(est_[j]);
  long* ord = order_.data();
  std::iota(ord, ord + n, 0L);
  std::stable_sort(ord, ord + n, [&](long a, long b) { return est_[a] > est_[b]; });
  // v's rows (dim 0) or columns (dim 1) in that order
  T* tmp = s1_.data();
  for (long i = 0; i < A; ++i)
    for (long j = 0; j < B; ++j)
      tmp[i * B + j] = dim == 0 ? v[ord[i] * B + j] : v[i * B + ord[j]];
  std::copy(tmp, tmp + A * B, v);
  // Q = qr(P[:, order]).Q: P's columns in order, column-major into Q's storage, and back
  for (long c = 0; c < n; ++c)
    for (long r = 0; r < n; ++r) Q[r + c * n] = P[r * n + ord[c]];
  const int info = qr_q(ni, Q, tau_.data(), work_.data(), static_cast<int>(work_.size()));
  NL_CHECK(info == 0, "[soap] the QR decomposition of a ({}, {}) power iteration failed (info {})",
           n, n, info);
  for (long r = 0; r < n; ++r)
    for (long c = r + 1; c < n; ++c) std::swap(Q[r * n + c], Q[c * n + r]);
}

template <class T>
void Soap<T>::statistics(const ParamSpec& s, const T* g, T* L, T* Ql, T* R, T* Qr, T* v) {
  const OptimConfig& c = this->cfg_;
  const int A = static_cast<int>(s.shape[0]), B = static_cast<int>(s.shape[1]);
  const T w = static_cast<T>(1.0 - shampoo_beta(c));
  T* outer = sq_.data();
  const auto average = [&](T* S, long n) {
    parallel_for(n * n, 32768, [&](long b, long e) {
      for (long j = b; j < e; ++j) S[j] = lerp_torch(S[j], outer[j], w);
    });
  };
  // L = lerp(L, G G^T, 1 - sb) (A, A);  R = lerp(R, G^T G, 1 - sb) (B, B)
  if (L) {
    gemm<T>(false, true, A, A, B, T(1), g, B, g, B, T(0), outer, A);
    average(L, A);
  }
  if (R) {
    gemm<T>(true, false, B, B, A, T(1), g, B, g, B, T(0), outer, B);
    average(R, B);
  }
  const long done = this->t_ - 1;  // the updates taken, this step's included
  if (done == 0) {
    if (L) eigenbasis(L, A, Ql);
    if (R) eigenbasis(R, B, Qr);
  } else if (done % kFrequency(c) == 0) {
    if (L) power_iteration(L, A, Ql, v, A, B, 0);
    if (R) power_iteration(R, B, Qr, v, A, B, 1);
  }
}

template <class T>
void Soap<T>::matrix_step(const ParamSpec& s, T* p, T* g, T* m, T* v, const T* Ql, const T* Qr,
                          T step, T decay) {
  const OptimConfig& c = this->cfg_;
  const int A = static_cast<int>(s.shape[0]), B = static_cast<int>(s.shape[1]);
  const long n = s.numel;
  T* s1 = s1_.data();
  T* s2 = s2_.data();
  // Q_L^T X Q_R (into the eigenbasis) or Q_L X Q_R^T (back), through the scratch buffers in
  // turn, the left side first as the reference's tensordot; returns where the result is.
  const auto rotate = [&](const T* x, bool back) {
    const T* cur = x;
    T* dst = nullptr;
    if (Ql) {
      dst = cur == s1 ? s2 : s1;
      gemm<T>(!back, false, A, B, A, T(1), Ql, A, cur, B, T(0), dst, B);
      cur = dst;
    }
    if (Qr) {
      dst = cur == s1 ? s2 : s1;
      gemm<T>(false, back, A, B, B, T(1), cur, B, Qr, B, T(0), dst, B);
    }
    return dst;
  };
  const T b1w = static_cast<T>(1.0 - c.beta1), b2w = static_cast<T>(1.0 - c.beta2);
  const T eps = static_cast<T>(c.eps);
  const T* gp = rotate(g, false);  // G' = Q_L^T G Q_R
  parallel_for(n, 32768, [&](long b, long e) {
    for (long j = b; j < e; ++j) {
      m[j] = lerp_torch(m[j], g[j], b1w);
      v[j] = lerp_torch(v[j], gp[j] * gp[j], b2w);
    }
  });
  T* q = rotate(m, false);  // Q_L^T m Q_R, then divided by sqrt(v) + eps
  parallel_for(n, 32768, [&](long b, long e) {
    for (long j = b; j < e; ++j) q[j] = q[j] / (std::sqrt(v[j]) + eps);
  });
  T* u = rotate(q, true);  // N = Q_L (...) Q_R^T
  T den = T(1);
  if (kNormalizeGrads(c)) {
    const double ss = chunked_sum(n, 32768, [&](long b, long e) {
      double acc = 0;
      for (long j = b; j < e; ++j) acc += static_cast<double>(u[j] * u[j]);
      return acc;
    });
    den = std::sqrt(static_cast<T>(ss / static_cast<double>(n))) + eps;
  }
  parallel_for(n, 32768, [&](long b, long e) {
    for (long j = b; j < e; ++j) p[j] = std::fma(-step, u[j] / den, p[j]) * decay;
  });
}

template <class T>
void Soap<T>::adam_step(T* p, const T* g, T* m, T* v, long n, T step, T decay) {
  // The update is formed twice when it is normalized (its mean square first), as Adafactor's.
  const OptimConfig& c = this->cfg_;
  const T b1w = static_cast<T>(1.0 - c.beta1), b2w = static_cast<T>(1.0 - c.beta2);
  const T eps = static_cast<T>(c.eps);
  const auto update = [&](long j) { return m[j] / (std::sqrt(v[j]) + eps); };
  T den = T(1);
  if (kNormalizeGrads(c)) {
    const double ss = chunked_sum(n, 32768, [&](long b, long e) {
      double acc = 0;
      for (long j = b; j < e; ++j) {
        m[j] = lerp_torch(m[j], g[j], b1w);
        v[j] = lerp_torch(v[j], g[j] * g[j], b2w);
        const T u = update(j);
        acc += static_cast<double>(u * u);
      }
      return acc;
    });
    den = std::sqrt(static_cast<T>(ss / static_cast<double>(n))) + eps;
  }
  parallel_for(n, 32768, [&](long b, long e) {
    for (long j = b; j < e; ++j) {
      if (!kNormalizeGrads(c)) {
        m[j] = lerp_torch(m[j], g[j], b1w);
        v[j] = lerp_torch(v[j], g[j] * g[j], b2w);
      }
      p[j] = std::fma(-step, update(j) / den, p[j]) * decay;
    }
  });
}

template <class T>
void Soap<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  const OptimConfig& c = this->cfg_;
  const long t = this->t_;
  const T k = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0;
  // The bias correction of the t - 1 updates taken (the first step takes none).
  const double done = static_cast<double>(t - 1);
  const double bc = kCorrectBias(c) && t > 1 ? std::sqrt(1.0 - std::pow(c.beta2, done)) /
                                                       (1.0 - std::pow(c.beta1, done))
                                                 : 1.0;
  std::size_t im = 0, il = 0, ir = 0;  // the next entry of m_ / v_, of l_ / ql_, of r_ / qr_
  for (const ParamSpec& s : this->table_.specs()) {
    if (!s.trained) continue;
    const long n = s.numel;
    T* p = params.data() + s.offset;
    T* g = grads.data() + s.offset;
    NL_CHECK(im < m_.size() && &m_.spec(im) == &s, "SOAP: no state for {}", s.name);
    T* m = m_.at(im);
    T* v = v_.at(im);
    ++im;
    T *L = nullptr, *Ql = nullptr, *R = nullptr, *Qr = nullptr;
    if (il < l_.size() && &l_.spec(il) == &s) {
      L = l_.at(il);
      Ql = ql_.at(il++);
    }
    if (ir < r_.size() && &r_.spec(ir) == &s) {
      R = r_.at(ir);
      Qr = qr_.at(ir++);
    }
    if (scaled)
      parallel_for(n, 32768, [&](long b, long e) {
        for (long j = b; j < e; ++j) g[j] *= k;
      });
    const double mult = this->lr_multiplier(s);  // 1 but under μP
    const double lr_s = lr * mult;
    const double wd = this->decayed(s) ? c.weight_decay / mult : 0.0;
    const T decay = static_cast<T>(1.0 - lr_s * wd);
    const T step = static_cast<T>(lr_s * bc);
    if (t > 1 && (L || R)) matrix_step(s, p, g, m, v, Ql, Qr, step, decay);
    if (t > 1 && !(L || R)) adam_step(p, g, m, v, n, step, decay);
    if (L || R) statistics(s, g, L, Ql, R, Qr, v);
  }
}

template class Soap<float>;
template class Soap<double>;

}  // namespace normlab
