#include "normlab/model.h"

#include <fmt/format.h>

#include "model/generate.h"
#include "model/model_impl.h"
#include "model/mup.h"
#include "normlab/errors.h"

namespace normlab {

namespace {
void check_shape(const Model& m, std::size_t n_idx, int B, int T, const char* what) {
  if (B < 1 || B > m.max_batch())
    throw InputError(fmt::format("[model.{}] batch {} outside 1..{} (max_batch)", what, B, m.max_batch()));
  if (T < 1 || T > m.config().seq_len)
    throw InputError(fmt::format("[model.{}] sequence length {} outside 1..{} (seq_len)", what, T,
                                 m.config().seq_len));
  if (n_idx != static_cast<std::size_t>(B) * T)
    throw InputError(fmt::format("[model.{}] {} token ids for a ({}, {}) batch", what, n_idx, B, T));
}
}  // namespace

Model::Model(const ModelConfig& cfg, std::uint64_t seed, int max_batch) {
  Config c;
  c.model = cfg;
  validate(c);
  if (max_batch < 1) throw InputError(fmt::format("[model] max_batch must be >= 1, got {}", max_batch));
  impl_ = std::make_unique<Impl>(cfg, max_batch);
  impl_->net.init_params(seed);
}
Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const ModelConfig& Model::config() const { return impl_->net.config(); }
int Model::max_batch() const { return impl_->net.max_batch(); }
long Model::num_params() const { return impl_->net.table().total(); }

namespace {
ParameterView view_of(const ParamSpec& s, float* data) {
  static constexpr const char* kInit[] = {"normal", "uniform", "constant"};
  return {s.name, s.shape, {data, static_cast<std::size_t>(s.numel)}, s.decay,
          std::string(to_string(s.group)), kInit[static_cast<int>(s.init)], s.init_scale,
          s.width.ninf, s.width.fan_in_mult, s.width.fan_out_mult,
          std::string(to_string(mup_class(s)))};
}
}  // namespace

std::vector<ParameterView> Model::parameters() {
  std::vector<ParameterView> out;
  for (const ParamSpec& s : impl_->net.table().specs()) out.push_back(view_of(s, impl_->net.param(s)));
  return out;
}

std::vector<ParameterView> Model::gradients() {
  std::vector<ParameterView> out;
  for (const ParamSpec& s : impl_->net.table().specs()) out.push_back(view_of(s, impl_->net.grad(s)));
  return out;
}

std::span<float> Model::parameter(std::string_view name) {
  const ParamSpec* s = impl_->net.table().find(name);
  if (s == nullptr) throw InputError(fmt::format("[model] no parameter named '{}'", name));
  return {impl_->net.param(*s), static_cast<std::size_t>(s->numel)};
}

BatchLoss Model::loss(std::span<const int> idx, std::span<const int> targets, int B, int T,
                      double z_alpha) {
  check_shape(*this, idx.size(), B, T, "loss");
  check_shape(*this, targets.size(), B, T, "loss");
  const LossStats st = impl_->net.forward(idx.data(), targets.data(), B, T, z_alpha, false);
  return {st.loss, st.ce, st.z_loss, st.lse_mean};
}

BatchLoss Model::loss_and_grads(std::span<const int> idx, std::span<const int> targets, int B,
                                int T, double z_alpha) {
  check_shape(*this, idx.size(), B, T, "loss_and_grads");
  check_shape(*this, targets.size(), B, T, "loss_and_grads");
  impl_->net.update_training_state();  // a training step's σReparam power iteration
  impl_->net.zero_grad();
  const LossStats st = impl_->net.forward(idx.data(), targets.data(), B, T, z_alpha, true);
  impl_->net.backward();
  impl_->net.grads();  // zero-fills any gradient the backward did not reach (views stay current)
  return {st.loss, st.ce, st.z_loss, st.lse_mean};
}

std::vector<float> Model::logits(std::span<const int> idx, int B, int T) {
  check_shape(*this, idx.size(), B, T, "logits");
  std::vector<float> out(static_cast<std::size_t>(B) * T * config().vocab_size);
  impl_->net.forward_logits(idx.data(), B, T, out.data());
  return out;
}

std::vector<int> Model::generate(const std::vector<int>& prompt, const SamplingSettings& s,
                                 const std::function<void(int)>& on_token) {
  SamplingOptions o;
  o.max_new_tokens = s.max_new_tokens;
  o.temperature = s.temperature;
  o.top_k = s.top_k;
  o.top_p = s.top_p;
  o.seed = s.seed;
  return normlab::generate(impl_->net, prompt, o, on_token ? on_token : [](int) {});
}

}  // namespace normlab
