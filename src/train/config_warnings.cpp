// Warnings about valid but suspicious settings (see config_warnings.h).
#include "train/config_warnings.h"

#include <fmt/format.h>

#include "model/norm_ops.h"
#include "tensor/threading.h"

namespace normlab {

std::vector<std::string> config_warnings(const Config& c, int cores) {
  std::vector<std::string> out;
  if (c.optim.warmup_steps > c.train.steps)
    out.push_back(fmt::format(
        "optim.warmup_steps = {} is greater than train.steps = {}: the warmup never ends, the "
        "learning rate peaks at {:.3g} instead of optim.lr = {:.3g}",
        c.optim.warmup_steps, c.train.steps,
        c.optim.lr * static_cast<double>(c.train.steps) / c.optim.warmup_steps, c.optim.lr));
  if (c.train.threads > cores)
    out.push_back(fmt::format(
        "train.threads = {} is more than the {} cores available to this process: the threads "
        "will share cores, which slows training down",
        c.train.threads, cores));
  // Keys of one optimizer's section set while another trains: a typo of optim.name, or a sweep
  // over them that would measure nothing. OptimConfig::settings holds only changed values.
  const OptimConfig d;
  const OptimConfig& o = c.optim;
  const std::string_view training = to_string(o.name);
  for (const auto& [id, value] : o.settings) {
    const std::string_view owner = std::string_view(id).substr(0, id.find('.'));
    if (owner != training)
      out.push_back(fmt::format("optim.{} has no effect with optim.name = {} (it is {}'s)", id,
                                training, owner));
  }
  if (o.qk_clip <= 0 && o.qk_clip_alpha != d.qk_clip_alpha)
    out.push_back(fmt::format("optim.qk_clip_alpha has no effect while optim.qk_clip = 0 (QK-Clip "
                              "is off)"));
  // DyT / Derf starting alphas while no site of theirs has an alpha; norm_eps while every site is
  // DyT or Derf (no statistics, no epsilon).
  const ModelConfig dm;
  const ModelConfig& m = c.model;
  // HybridNorm's q/k/v norms are QK sites of model.norm's kind unless model.qk_norm is set.
  const bool hybrid = m.placement == Placement::hybrid;
  const bool qk = m.qk_norm != QKNormKind::none || hybrid;
  const NormTraits res = norm_traits(m.norm);
  const NormTraits qkt =
      qk ? norm_traits(m.qk_norm != QKNormKind::none ? qk_norm_kind(m.qk_norm) : m.norm)
         : NormTraits{};
  const auto no_alpha = [&](const char* key, bool changed, const char* kind_key,
                            std::string_view kind) {
    if (changed)
      out.push_back(fmt::format("model.{} has no effect with model.{} = {} (it is the initial "
                                "alpha of DyT and Derf sites)",
                                key, kind_key, kind));
  };
  // nGPT's norm sites are its unit-sphere projection whatever model.norm says (DyT and Derf are
  // refused by validation).
  if (m.placement == Placement::ngpt && m.norm != dm.norm && m.norm != NormKind::l2)
    out.push_back(fmt::format("model.norm = {} has no effect with model.placement = ngpt (every "
                              "norm site of nGPT is its projection onto the unit sphere, l2): "
                              "drop it",
                              to_string(m.norm)));
  if (!res.alpha) {
    no_alpha("dyt_alpha_attn", m.dyt_alpha_attn != dm.dyt_alpha_attn, "norm", to_string(m.norm));
    no_alpha("dyt_alpha_mlp", m.dyt_alpha_mlp != dm.dyt_alpha_mlp, "norm", to_string(m.norm));
    no_alpha("dyt_alpha_final", m.dyt_alpha_final != dm.dyt_alpha_final, "norm",
             to_string(m.norm));
  }
  if (!qkt.alpha)
    no_alpha("dyt_alpha_qk", m.dyt_alpha_qk != dm.dyt_alpha_qk, "qk_norm", to_string(m.qk_norm));
  if (!res.row_stats && !qkt.row_stats && m.norm_eps != dm.norm_eps)
    out.push_back(fmt::format("model.norm_eps has no effect with model.norm = {} and model.qk_norm "
                              "= {} (DyT and Derf have no epsilon)",
                              to_string(m.norm), to_string(m.qk_norm)));
  // A residual branch scale's starting value while model.residual_scale is another (ReZero
  // always starts at 0).
  const auto no_scale = [&](const char* key, bool changed, std::string_view whose) {
    if (changed)
      out.push_back(fmt::format("model.{} has no effect with model.residual_scale = {} (it is the "
                                "initial value of {}'s scale)",
                                key, to_string(m.residual_scale), whose));
  };
  if (m.residual_scale != ResidualScale::layerscale)
    no_scale("layerscale_init", m.layerscale_init != dm.layerscale_init, "layerscale");
  if (m.residual_scale != ResidualScale::skipinit)
    no_scale("skipinit_init", m.skipinit_init != dm.skipinit_init, "skipinit");
  // QK-Clip rescales the query and key rows of wqkv of the clipped heads; under σReparam the
  // layer uses W_hat = (gamma / sigma(W)) W, which divides part of that back out (all of it for a
  // clip of every head), so the per-head cap on the logits does not hold.
  if (m.sigma_reparam && o.qk_clip > 0)
    out.push_back(fmt::format("optim.qk_clip = {:g} with model.sigma_reparam = true: QK-Clip "
                              "rescales rows of wqkv, and W_hat = (gamma / sigma(W)) W divides "
                              "part of that back out; the logit cap does not hold",
                              o.qk_clip));
  // nGPT: its own key off it, and the settings it makes moot (its sites are bare unit-sphere
  // projections; its matrices are re-normalised after every step).
  if (m.placement != Placement::ngpt && m.ngpt_alpha_init != dm.ngpt_alpha_init)
    out.push_back(fmt::format("model.ngpt_alpha_init has no effect with model.placement = {} (it "
                              "is nGPT's initial eigen learning rate)",
                              to_string(m.placement)));
  if (m.placement == Placement::ngpt) {
    if (m.norm != dm.norm || m.norm_eps != dm.norm_eps || m.norm_gain_offset != dm.norm_gain_offset)
      out.push_back(fmt::format("model.norm, norm_eps and norm_gain_offset have no effect with "
                                "model.placement = ngpt (every site is x / ||x||, without a "
                                "gain)"));
    if (c.optim.weight_decay > 0)
      out.push_back(fmt::format(
          "optim.weight_decay = {:g} with model.placement = ngpt: the decayed matrices are "
          "re-normalised after every step, so decay only rescales their step a little (the paper "
          "trains without it; nGPT's default is 0)",
          c.optim.weight_decay));
  }
  if (m.init != InitKind::admin && m.admin_omega != dm.admin_omega)
    out.push_back(fmt::format("model.admin_omega has no effect with model.init = {} (it is Admin's "
                              "starting omega, model.init = admin)",
                              to_string(m.init)));
  if (!hybrid && m.hybrid_first_pre)
    out.push_back(fmt::format("model.hybrid_first_pre has no effect with model.placement = {} (it "
                              "is HybridNorm*, model.placement = hybrid)",
                              to_string(m.placement)));
  return out;
}

std::vector<std::string> config_warnings(const Config& c) {
  return config_warnings(c, available_cores());
}

}  // namespace normlab
