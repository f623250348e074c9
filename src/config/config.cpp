// Enum names and validation of the typed configuration (see include/normlab/config.h).
//
// Parsing lives in config_file.cpp; this file only knows the structs. Validation collects every
// problem instead of stopping at the first, and each message names the key and its value: a key's
// own checks are in its row of the key table (keys.cpp), refusals between options rows of the
// compatibility table (compat.cpp); validation_errors adds the rules that span several keys.
#include "normlab/config.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>

#include <fmt/format.h>

#include "config/compat.h"
#include "config/keys.h"
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
                                               "adafactor", "soap"};
  static constexpr OptimizerKind last = OptimizerKind::soap;
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
NL_ENUM(SourceKind)
#undef NL_ENUM

// The rules that span several keys of one shape; each key's own range is in its key row
// (keys.cpp, key_checks.h) and every refusal of one option by another a row of the compatibility
// table (compat.cpp). Problems come out by stage: the model section's keys, the refusals, the
// model's shape; μP's base model when all of that holds; then the other sections.
std::vector<std::string> validation_errors(const Config& c) {
  std::vector<std::string> problems;
  auto add = [&problems](std::string p) { problems.push_back(std::move(p)); };
  keytab::check_keys(c, "model", problems);
  for (auto& p : compat::problems(c)) add(std::move(p));

  const ModelConfig& m = c.model;
  if (const double want = m.d_ff_mult * m.d_model; std::fabs(want - std::round(want)) > 1e-9 * want)
    add(fmt::format("model.d_ff_mult = {} times model.d_model = {} is {}, not a whole number "
                    "of MLP units", m.d_ff_mult, m.d_model, want));
  if (m.n_head > 0 && m.n_kv_head > 0 && m.n_head % m.n_kv_head != 0)
    add(fmt::format("model.n_head = {} is not divisible by model.n_kv_head = {} (each key/value "
                    "head serves n_head / n_kv_head query heads)",
                    m.n_head, m.n_kv_head));
  if (m.d_model > 0 && m.n_head > 0 && m.head_dim >= 0) {
    if (m.head_dim == 0 && m.d_model % m.n_head != 0) {
      add(fmt::format("model.d_model = {} is not divisible by model.n_head = {} (or set "
                      "model.head_dim)",
                      m.d_model, m.n_head));
    } else if (m.pos == PosKind::rope && m.head_size() % 2 != 0) {
      // RoPE rotates pairs (x[i], x[i + D/2]) of each head's D dimensions.
      if (m.head_dim > 0)
        add(fmt::format("model.head_dim = {} is odd; model.pos = \"rope\" needs an even one",
                        m.head_dim));
      else
        add(fmt::format("model.d_model / model.n_head = {} / {} = {} is an odd head dimension; "
                        "model.pos = \"rope\" needs an even one",
                        m.d_model, m.n_head, m.head_size()));
    }
  }
  if (m.rope_scaling == RopeScaling::llama3 &&
      !(m.rope_high_freq_factor > m.rope_low_freq_factor))
    add(fmt::format("model.rope_high_freq_factor = {} must be > model.rope_low_freq_factor = {} "
                    "(llama3 RoPE scaling)",
                    m.rope_high_freq_factor, m.rope_low_freq_factor));
  if (auto why = layer_pattern_error(m.layer_pattern, m.n_layer)) {
    add(fmt::format("model.layer_pattern = \"{}\" {}", m.layer_pattern, *why));
  } else {
    bool any_sliding = false;
    for (int l = 0; l < m.n_layer; ++l) any_sliding = any_sliding || m.layer_sliding(l);
    if (any_sliding && m.sliding_window == 0)
      add(fmt::format("model.layer_pattern = \"{}\" has sliding layers: set "
                      "model.sliding_window > 0",
                      m.layer_pattern));
    if (!any_sliding && m.sliding_window > 0)
      add(fmt::format("model.sliding_window = {} has no effect: model.layer_pattern = \"{}\" "
                      "has no sliding layers (\"sliding\", \"every:K\" or a list)",
                      m.sliding_window, m.layer_pattern));
    if (!any_sliding && m.rope_local_theta > 0)
      add(fmt::format("model.rope_local_theta = {} has no effect: no layer is sliding",
                      m.rope_local_theta));
  }
  // μP's base model only of a model that is otherwise valid (its widths divide).
  if (m.parametrization == Parametrization::mup && problems.empty()) {
    if (m.mup_base_width == 0) {
      problems.emplace_back(
          "model.parametrization = \"mup\" needs model.mup_base_width: the d_model of the base "
          "model whose hyperparameters (optim.lr, model.init_std) are to carry over");
    } else {
      try {
        (void)mup_base_model(m);
      } catch (const ConfigError& e) {
        for (const std::string& p : e.problems) add(p);
      }
    }
  }

  for (const std::string_view section : keytab::section_names())
    if (section != "model") keytab::check_keys(c, section, problems);
  // A setting no declared key holds (only a C++ caller writing the settings directly can make
  // one; the readers refuse the key by name).
  for (const auto& [id, value] : c.model.settings)
    if (keytab::find_key("model", id) == nullptr)
      add(fmt::format("model.settings holds '{}', which is no model key (config_keys() lists "
                      "them)",
                      id));
  for (const auto& [id, value] : c.optim.settings) {
    const auto dot = id.find('.');
    if (dot == std::string::npos ||
        keytab::find_key(fmt::format("optim.{}", id.substr(0, dot)), id.substr(dot + 1)) ==
            nullptr)
      add(fmt::format("optim.settings holds '{}', which is no optimizer's key (config_keys() lists "
                      "them)",
                      id));
  }
  if (c.train.eval_interval > 0 && c.train.eval_batches == 0)
    add(fmt::format("train.eval_batches = 0 must be > 0 when train.eval_interval = {} > 0",
                    c.train.eval_interval));
  return problems;
}

void validate(const Config& c) {
  auto problems = validation_errors(c);
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace normlab
