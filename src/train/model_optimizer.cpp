#include "normlab/optimizer.h"

#include <fmt/format.h>

#include "model/model_impl.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"
#include "train/optimizer.h"
#include "train/qk_clip.h"

namespace normlab {

struct ModelOptimizer::Impl {
  Transformer<float>& net;
  std::unique_ptr<Optimizer<float>> opt;
};

ModelOptimizer::ModelOptimizer(const Config& cfg, Model& model) {
  validate(cfg);
  if (!(cfg.model == model.config()))
    throw ConfigError({"[optimizer] the config's model section is not the model's config"});
  Transformer<float>& net = model.impl().net;
  impl_ = std::make_unique<Impl>(Impl{net, make_optimizer<float>(net.table(), cfg.optim, cfg.model)});
  impl_->opt->set_matmul_precision(
      resolve_matmul_precision(cfg.train.matmul_precision) == MatmulPrecision::bf16
          ? GemmPrecision::bf16
          : GemmPrecision::float32);
}
ModelOptimizer::ModelOptimizer(ModelOptimizer&&) noexcept = default;
ModelOptimizer& ModelOptimizer::operator=(ModelOptimizer&&) noexcept = default;
ModelOptimizer::~ModelOptimizer() = default;

void ModelOptimizer::step(double lr, double grad_scale, std::span<const double> maxima) {
  const ModelConfig& m = impl_->net.config();
  const long want = static_cast<long>(m.n_layer) * m.n_head;
  if (impl_->opt->needs_attention_maxima() && static_cast<long>(maxima.size()) != want)
    throw InputError(fmt::format("[optimizer] QK-Clip needs the step's attention maxima: {} values "
                                 "(n_layer x n_head), got {}",
                                 want, maxima.size()));
  impl_->opt->update(impl_->net.params(), impl_->net.grads(), lr, grad_scale, {maxima});
}

std::vector<ParameterView> ModelOptimizer::state() {
  std::vector<ParameterView> out;
  for (StateArena<float>* a : impl_->opt->state())
    for (std::size_t i = 0; i < a->size(); ++i) {
      const StateEntry& e = a->entries[i];
      const ParamSpec& s = *e.param;
      ParameterView v;
      v.name = e.name;
      v.shape = e.shape;
      v.values = {a->at(i), static_cast<std::size_t>(e.numel)};
      v.decayed = impl_->opt->decayed(s);
      v.group = std::string(to_string(s.group));
      out.push_back(std::move(v));
    }
  return out;
}

std::vector<std::pair<std::string, double>> ModelOptimizer::lr_multipliers() const {
  std::vector<std::pair<std::string, double>> out;
  for (const ParamSpec& s : impl_->opt->table().specs()) out.emplace_back(s.name, impl_->opt->lr_multiplier(s));
  return out;
}

long ModelOptimizer::steps_taken() const { return impl_->opt->steps_taken(); }
std::string ModelOptimizer::name() const { return std::string(to_string(impl_->opt->kind())); }
int ModelOptimizer::qk_clip_heads() const {
  const QkClipEvents* e = impl_->opt->qk_clip_events();
  return e ? e->heads_clipped : 0;
}
double ModelOptimizer::qk_clip_max_logit() const {
  const QkClipEvents* e = impl_->opt->qk_clip_events();
  return e ? e->max_logit : 0.0;
}

}  // namespace normlab
