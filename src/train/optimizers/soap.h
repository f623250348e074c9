// SOAP (Vyas et al. 2024, "SOAP: Improving and Stabilizing Shampoo using Adam"): Adam run in the
// eigenbasis of Shampoo's preconditioner, with the semantics of pytorch_optimizer.SOAP 4.1.0, its
// reference (merge_dims, precondition_1d and maximize off, as its defaults). Every tensor of the
// table is one SOAP tensor (the fused wqkv is one matrix). At step t, with lr the schedule's
// learning rate (times μP's multiplier), b1, b2 = optim.beta1, beta2 and sb = shampoo_beta:
//   t = 1: L = (1 - sb) G G^T (A, A), R = (1 - sb) G^T G (B, B);
//          Q_L, Q_R = their eigenvectors by decreasing eigenvalue (eigh of L + 1e-30 I); no update
//   t > 1, with s = t - 1 the updates taken so far, counting this one:
//     G' = Q_L^T G Q_R                            (the gradient in the eigenbasis)
//     m = lerp(m, G, 1 - b1);  v = lerp(v, G'^2, 1 - b2)     (m in the parameter's basis)
//     N = Q_L ((Q_L^T m Q_R) / (sqrt(v) + eps)) Q_R^T
//     N = N / (sqrt(mean(N^2)) + eps)             (optim.soap.normalize_grads)
//     p = (p - lr sqrt(1 - b2^s) / (1 - b1^s) N) (1 - lr wd)   (the bias correction:
//                                                               optim.soap.correct_bias)
//     L = lerp(L, G G^T, 1 - sb);  R = lerp(R, G^T G, 1 - sb)
//     every optim.soap.precondition_frequency updates (s % f == 0), one power iteration per side:
//       P = L Q_L; order its columns by the estimated eigenvalue diag(Q_L^T P), decreasing;
//       reorder v's rows the same way; Q_L = Q of the QR decomposition of P  (R, v's columns alike)
// A side longer than optim.soap.max_precond_dim keeps no statistics (its Q is the identity); a
// vector has none (precondition_1d off): Adam with SOAP's step-1 skip and shifted bias correction.
// sb = optim.soap.shampoo_beta (< 0: optim.beta2, the reference's None; [optim.soap] is
// declared in soap.cpp); wd = optim.weight_decay
// where the parameter decays (Optimizer::decayed). Under μP it takes the Adam family's
// learning-rate rule (Optimizer::lr_multiplier's default), which no coordinate check has
// confirmed for SOAP. The eigendecomposition (syevd, in float64 whatever T) and the QR (geqrf +
// orgqr, in T; the reference's is float32 even for float64) are LAPACK's, from OpenBLAS, on the
// calling thread (OpenBLAS is single-threaded where normlab's sgemm is compiled in,
// tensor/threading.h, so the results do not depend on train.threads); the products are
// normlab's GEMM in T whatever train.matmul_precision says.
// Eigenvectors are defined up to their signs, which every use of Q here (Q X Q^T, squares in the
// eigenbasis) cancels; the eigenvectors of a repeated eigenvalue are not defined at all (the null
// space of a first statistic G G^T of a side longer than the other), and there normlab and the
// reference choose different bases (tests/py/test_soap_parity.py).
// State: soap.exp_avg.<param>, soap.exp_avg_sq.<param> (the parameter's shape; exp_avg_sq in the
// eigenbasis), and for each preconditioned side of an (A, B) matrix soap.L.<param> and
// soap.Q_L.<param> (A, A), soap.R.<param> and soap.Q_R.<param> (B, B).
#pragma once
#include <string>
#include <vector>

#include "train/optimizer.h"

namespace normlab {

template <class T>
class Soap final : public Optimizer<T> {
 public:
  Soap(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model = {});
  std::vector<StateArena<T>*> state() override { return {&m_, &v_, &l_, &ql_, &r_, &qr_}; }
  static long state_elements(const ParamTable& table, const OptimConfig& cfg);
  // describe_optimizer's line (train/optimizer.h).
  static std::string describe(const ParamTable& table, const OptimConfig& cfg);

 protected:
  void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) override;

 private:
  // One matrix's update (t > 1), then its statistics (every t); Ql, Qr (L, R) null for a side
  // without them.
  void matrix_step(const ParamSpec& s, T* p, T* g, T* m, T* v, const T* Ql, const T* Qr, T step,
                   T decay);
  // Adam in the parameter's own basis (t > 1): a vector, or a matrix with both sides too long.
  void adam_step(T* p, const T* g, T* m, T* v, long n, T step, T decay);
  void statistics(const ParamSpec& s, const T* g, T* L, T* Ql, T* R, T* Qr, T* v);
  // Q = the eigenvectors of S (n, n), by decreasing eigenvalue.
  void eigenbasis(const T* S, long n, T* Q);
  // One power iteration of Q against S (n, n), reordering v (A, B) along `dim` (0 or 1).
  void power_iteration(const T* S, long n, T* Q, T* v, long A, long B, int dim);

  StateArena<T> m_, v_, l_, ql_, r_, qr_;
  std::vector<T> s1_, s2_;           // (largest A B) products of a matrix step; v reordered
  std::vector<T> sq_;                // (largest n, n) a side's product, column-major LAPACK input
  std::vector<double> est_;          // (largest n) estimated eigenvalues
  std::vector<long> order_;          // (largest n) their order
  std::vector<T> tau_, work_;        // QR: reflectors, workspace
  std::vector<double> eig_a_, eig_w_, eig_work_;  // eigh in float64: matrix, values, workspace
  std::vector<int> eig_iwork_;
};

extern template class Soap<float>;
extern template class Soap<double>;

}  // namespace normlab
