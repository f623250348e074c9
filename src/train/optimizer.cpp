#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/mup.h"
#include "normlab/errors.h"
#include "train/optimizers/adamw_kernel.h"
#include "train/optimizers/registry.h"
#include "train/qk_clip.h"

namespace normlab {

namespace {
// Lays out the covered parameters' entries as ParamTable::add lays out parameters (table order,
// 16-element aligned), each of its own shape (`shape`, the parameter's when empty); returns the
// size.
long layout(const std::string& prefix, const ParamTable& table,
            const std::function<bool(const ParamSpec&)>& covers, const StateShape& shape,
            std::vector<StateEntry>* entries) {
  long total = 0;
  for (const ParamSpec& s : table.specs()) {
    if (!s.trained || !covers(s)) continue;  // buffers (ParamSpec::trained) have no state
    const long off = (total + 15) / 16 * 16;
    std::vector<std::int64_t> dims = shape ? shape(s) : s.shape;
    long n = 1;
    for (const std::int64_t d : dims) n *= static_cast<long>(d);
    if (entries) entries->push_back({&s, prefix + s.name, std::move(dims), n, off});
    total = off + n;
  }
  return total;
}
}  // namespace

template <class T>
StateArena<T>::StateArena(std::string name, const ParamTable& table,
                          const std::function<bool(const ParamSpec&)>& covers,
                          const StateShape& shape)
    : prefix(std::move(name)) {
  data.assign(layout(prefix, table, covers, shape, &entries), T(0));
}

template <class T>
long StateArena<T>::elements(const ParamTable& table,
                             const std::function<bool(const ParamSpec&)>& covers,
                             const StateShape& shape) {
  return layout({}, table, covers, shape, nullptr);
}

template <class T>
Optimizer<T>::Optimizer(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model)
    : table_(table), cfg_(cfg) {
  if (cfg.qk_clip > 0) qk_clip_ = std::make_unique<QkClip>(table, model, cfg.qk_clip, cfg.qk_clip_alpha);
}

template <class T>
Optimizer<T>::~Optimizer() = default;

template <class T>
void Optimizer<T>::update(std::span<T> params, std::span<T> grads, double lr, double grad_scale,
                          const StepSignals& signals) {
  ++t_;
  apply(params, grads, lr, grad_scale);
  if (qk_clip_) {
    NL_CHECK(!signals.attn_max_logit_head.empty(),
             "QK-Clip needs the step's attention maxima (StepSignals::attn_max_logit_head)");
    qk_clip_->apply(params.data(), signals.attn_max_logit_head);
  }
  // The table's constraints, after any optimizer's step (nGPT's unit-norm matrices, ParamSpec::
  // unit_norm): one hook for every optimizer, none of which knows of it.
  apply_unit_norms(table_, params.data());
}

template <class T>
std::vector<const StateArena<T>*> Optimizer<T>::state() const {
  std::vector<const StateArena<T>*> out;
  for (StateArena<T>* a : const_cast<Optimizer*>(this)->state()) out.push_back(a);
  return out;
}

template <class T>
const QkClipEvents* Optimizer<T>::qk_clip_events() const {
  return qk_clip_ ? &qk_clip_->events() : nullptr;
}

template <class T>
std::vector<double> Optimizer<T>::second_moment_ratio(std::span<const T>) const {
  return std::vector<double>(table_.specs().size(), std::nan(""));
}

template <class T>
void second_moment_rms(const ParamTable& table, const StateArena<T>& v, double bc2, double eps,
                       std::span<const T> grads, std::vector<double>& out) {
  out.resize(table.specs().size(), std::nan(""));
  const double e2 = eps * eps;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const ParamSpec& s = v.spec(i);
    NL_CHECK(v.entries[i].numel == s.numel, "second_moment_rms: {} is not parameter-shaped",
             v.entries[i].name);
    const T* g = grads.data() + s.offset;
    const T* vi = v.at(i);
    double sum = 0;
    for (long j = 0; j < s.numel; ++j) {
      const double gj = g[j];
      sum += gj * gj / std::max(static_cast<double>(vi[j]) / bc2, e2);
    }
    out[static_cast<std::size_t>(&s - table.specs().data())] =
        std::sqrt(sum / static_cast<double>(s.numel));
  }
}
template void second_moment_rms(const ParamTable&, const StateArena<float>&, double, double,
                                std::span<const float>, std::vector<double>&);
template void second_moment_rms(const ParamTable&, const StateArena<double>&, double, double,
                                std::span<const double>, std::vector<double>&);

template <class T>
double Optimizer<T>::lr_multiplier(const ParamSpec& s) const {
  return adam_lr_multiplier(s);
}

template <class T>
bool Optimizer<T>::decayed(const ParamSpec& s) const {
  if (!s.decay) return false;
  if (s.group == ParamGroup::embedding) return cfg_.decay_embeddings;
  return true;
}

template <class T>
double gradient_norm(const ParamTable& table, std::span<const T> grads) {
  double ss = 0;
  for (const ParamSpec& s : table.specs())
    if (s.trained) ss += sum_squares(grads.data() + s.offset, s.numel);
  return std::sqrt(ss);
}
template double gradient_norm<float>(const ParamTable&, std::span<const float>);
template double gradient_norm<double>(const ParamTable&, std::span<const double>);

double clip_scale(double grad_clip, double grad_norm) {
  return grad_clip > 0 ? std::min(1.0, grad_clip / (grad_norm + 1e-6)) : 1.0;
}

template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(const ParamTable& table, const OptimConfig& cfg,
                                             const ModelConfig& model) {
  for (const OptimizerRow& r : optimizer_registry())
    if (r.kind == cfg.name) {
      if constexpr (std::is_same_v<T, float>) return r.make_f(table, cfg, model);
      else return r.make_d(table, cfg, model);
    }
  throw InternalError(fmt::format("no optimizer registered for optim.name = {}", to_string(cfg.name)));
}

long optimizer_state_elements(const ParamTable& table, const OptimConfig& cfg) {
  for (const OptimizerRow& r : optimizer_registry())
    if (r.kind == cfg.name) return r.state_elements(table, cfg);
  throw InternalError(fmt::format("no optimizer registered for optim.name = {}", to_string(cfg.name)));
}

std::string describe_optimizer(const ParamTable& table, const OptimConfig& c) {
  std::string s;
  for (const OptimizerRow& r : optimizer_registry())
    if (r.kind == c.name) s = r.describe(table, c);
  if (c.qk_clip > 0)
    s += fmt::format(" | QK-Clip at {:g} (alpha {:g})", c.qk_clip, c.qk_clip_alpha);
  // The table's constraints, restored after every step whichever optimizer took it (nGPT).
  const long unit = std::count_if(table.specs().begin(), table.specs().end(), [](const ParamSpec& p) {
    return p.unit_norm != UnitNorm::none;
  });
  if (unit > 0) {
    if (s.empty()) s = fmt::format("optimizer {}", to_string(c.name));
    s += fmt::format(" | unit norm restored after each step on {} matrices", unit);
  }
  return s;
}

template struct StateArena<float>;
template struct StateArena<double>;
template class Optimizer<float>;
template class Optimizer<double>;
template std::unique_ptr<Optimizer<float>> make_optimizer(const ParamTable&, const OptimConfig&,
                                                          const ModelConfig&);
template std::unique_ptr<Optimizer<double>> make_optimizer(const ParamTable&, const OptimConfig&,
                                                           const ModelConfig&);

}  // namespace normlab
