#include "train/optimizers/muon.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "config/option_keys.h"
#include "model/mup.h"
#include "tensor/threading.h"
#include "train/optimizers/adamw.h"
#include "train/optimizers/lerp.h"

namespace normlab {

namespace {

using keytab::check::greater_than;
using keytab::check::in_half_open;
using keytab::check::less_than;
using keytab::check::non_negative;
namespace resume = keytab::resume;

// [optim.muon]
const OptionKey<double> kAdamwLr{"muon", "adamw_lr", 0.0, resume::resumable, "optim.adamw_lr",
                                 non_negative()};
const OptionKey<double> kMomentum{"muon", "momentum", 0.95, resume::moments, "optim.momentum",
                                  in_half_open(0, 1)};
const OptionKey<bool> kNesterov{"muon", "nesterov", true, resume::resumable, "optim.nesterov"};
const OptionKey<int> kNsSteps{"muon", "ns_steps", 5, resume::resumable, "optim.ns_steps",
                              greater_than(0), less_than(100, "(as torch.optim.Muon)")};
const OptionKey<double> kNsA{"muon", "ns_a", 3.4445, resume::resumable, "optim.ns_a"};
const OptionKey<double> kNsB{"muon", "ns_b", -4.7750, resume::resumable, "optim.ns_b"};
const OptionKey<double> kNsC{"muon", "ns_c", 2.0315, resume::resumable, "optim.ns_c"};
const OptionKey<double> kNsEps{"muon", "ns_eps", 1e-7, resume::resumable, "optim.ns_eps",
                               greater_than(0)};
const OptionKey<MuonAdjustLr> kAdjustLr{"muon", "adjust_lr", MuonAdjustLr::original,
                                        resume::resumable, "optim.adjust_lr"};

bool is_matrix(const ParamSpec& s) { return s.hidden_matrix(); }
bool is_other(const ParamSpec& s) { return !s.hidden_matrix(); }

// The row blocks of a matrix parameter: its own, or the whole matrix.
std::vector<std::int64_t> blocks_of(const ParamSpec& s) {
  return s.row_blocks.empty() ? std::vector<std::int64_t>{s.shape[0]} : s.row_blocks;
}

}  // namespace

MuonSettings MuonSettings::of(const OptimConfig& o) {
  return {kAdamwLr(o), kMomentum(o), kNesterov(o), kNsSteps(o), kNsA(o),
          kNsB(o),     kNsC(o),      kNsEps(o),    kAdjustLr(o)};
}

template <class T>
Muon<T>::Muon(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model)
    : Optimizer<T>(table, cfg, model),
      set_(MuonSettings::of(cfg)),
      mom_("muon.momentum.", table, is_matrix),
      m_("adam.m.", table, is_other),
      v_("adam.v.", table, is_other) {
  long max_elems = 0, max_short = 0;
  for (const StateEntry& e : mom_.entries)
    for (const std::int64_t rows : blocks_of(*e.param)) {
      max_elems = std::max<long>(max_elems, rows * e.param->shape[1]);
      max_short = std::max<long>(max_short, std::min<long>(rows, e.param->shape[1]));
    }
  u_.resize(max_elems);
  ns_.reserve(max_elems, max_short);
}

template <class T>
long Muon<T>::state_elements(const ParamTable& table) {
  return StateArena<T>::elements(table, is_matrix) + 2 * StateArena<T>::elements(table, is_other);
}

template <class T>
double Muon<T>::adjust(MuonAdjustLr rule, long A, long B) {
  if (rule == MuonAdjustLr::match_rms_adamw)
    return 0.2 * std::sqrt(static_cast<double>(std::max(A, B)));
  return std::sqrt(std::max(1.0, static_cast<double>(A) / static_cast<double>(B)));
}

template <class T>
std::vector<double> Muon<T>::second_moment_ratio(std::span<const T> grads) const {
  std::vector<double> out(this->table_.specs().size(), std::nan(""));
  const double bc2 = 1.0 - std::pow(this->cfg_.beta2, static_cast<double>(this->t_));
  second_moment_rms(this->table_, v_, bc2, this->cfg_.eps, grads, out);
  return out;
}

template <class T>
void Muon<T>::apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) {
  const OptimConfig& c = this->cfg_;
  const MuonSettings& m = set_;
  const double adam_lr = m.adamw_lr > 0 ? lr * (m.adamw_lr / c.lr) : lr;
  adamw_group(*this, m_, v_, params.data(), grads.data(), adam_lr, grad_scale, this->t_);

  const NsCoefficients ns{m.ns_a, m.ns_b, m.ns_c, m.ns_steps, m.ns_eps};
  const T mu = static_cast<T>(m.momentum), w = static_cast<T>(1.0 - m.momentum);
  const T k = static_cast<T>(grad_scale);
  const bool scaled = grad_scale != 1.0, nesterov = m.nesterov;
  for (std::size_t i = 0; i < mom_.size(); ++i) {
    const ParamSpec& s = mom_.spec(i);
    const long cols = s.shape[1];
    const T decay = static_cast<T>(1.0 - lr * (this->decayed(s) ? c.weight_decay : 0.0));
    long row0 = 0;
    for (const std::int64_t rows : blocks_of(s)) {
      const long off = row0 * cols, n = rows * cols;
      T* p = params.data() + s.offset + off;
      T* g = grads.data() + s.offset + off;
      T* buf = mom_.at(i) + off;
      T* u = u_.data();
      parallel_for(n, 32768, [&](long b, long e) {
        for (long j = b; j < e; ++j) {
          const T gj = scaled ? g[j] * k : g[j];
          g[j] = gj;
          buf[j] = lerp_torch(buf[j], gj, w);
          u[j] = nesterov ? lerp_torch(gj, buf[j], mu) : buf[j];
        }
      });
      ns_.run(u, u, static_cast<int>(rows), static_cast<int>(cols), ns, this->mm_);
      const T step = static_cast<T>(-lr * this->lr_multiplier(s) * adjust(m.adjust_lr, rows, cols));
      parallel_for(n, 32768, [&](long b, long e) {
        for (long j = b; j < e; ++j) {
          const T pj = p[j] * decay;
          p[j] = pj + step * u[j];
        }
      });
      row0 += rows;
    }
  }
}

template <class T>
double Muon<T>::lr_multiplier(const ParamSpec& s) const {
  return s.hidden_matrix() ? muon_lr_multiplier(s, set_.adjust_lr) : adam_lr_multiplier(s);
}

template <class T>
std::string Muon<T>::describe(const ParamTable& table, const OptimConfig& c) {
  const MuonSettings m = MuonSettings::of(c);
  long mats = 0, blocks = 0, others = 0;
  for (const ParamSpec& p : table.specs()) {
    if (!p.hidden_matrix()) {
      ++others;
      continue;
    }
    ++mats;
    blocks += p.row_blocks.empty() ? 1 : static_cast<long>(p.row_blocks.size());
  }
  return fmt::format(
      "optimizer muon: Muon (momentum {:g}{}, {} Newton-Schulz steps, adjust_lr {}) on {} "
      "matrices ({} with q, k, v and gate/up apart); AdamW on {} tensors at lr {:g}",
      m.momentum, m.nesterov ? ", Nesterov" : "", m.ns_steps, to_string(m.adjust_lr), mats, blocks,
      others, m.adamw_lr > 0 ? m.adamw_lr : c.lr);
}

template class Muon<float>;
template class Muon<double>;

}  // namespace normlab
