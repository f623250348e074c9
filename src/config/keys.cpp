// The table of configuration keys and what every front end needs from it: each key bound to its
// Config field once (its section and name are the stringified member names, so they cannot drift),
// conversions between fields and neutral Scalars with type checks, the TOML text of a value, each
// key's own checks (key_checks.h); the "did you mean" suggestions for unknown names are
// keys_suggest.cpp, the table of other trainers' names (nanoGPT, Hugging Face, OLMo) with the
// normlab key or what normlab does instead keys_foreign.cpp.
#include "config/keys.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "config/source.h"
#include "data/text_check.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab::keytab {

// ---- Scalars as text ------------------------------------------------------------------------

// Shortest text that reads back to exactly `v`, always recognisable as a TOML float ("2.0").
std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// TOML basic string: quotes, backslashes and control characters escaped.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"') out += "\\\"";
    else if (ch == '\\') out += "\\\\";
    else if (ch == '\n') out += "\\n";
    else if (ch == '\t') out += "\\t";
    else if (u < 0x20 || u == 0x7f) out += fmt::format("\\u{:04X}", u);
    else out += ch;
  }
  return out + "\"";
}

// The value as TOML writes it.
std::string toml_text(const Scalar& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, double>) return format_double(x);
        else if constexpr (std::is_same_v<T, std::string>) return quote(x);
        else if constexpr (std::is_same_v<T, StringList>) {
          std::string out = "[";
          for (std::size_t i = 0; i < x.size(); ++i) out += (i ? ", " : "") + quote(x[i]);
          return out + "]";
        } else return fmt::format("{}", x);
      },
      v);
}

// "2.0 (a float)", for messages.
std::string describe(const Scalar& v) {
  static constexpr std::string_view what[] = {"a boolean", "an integer", "an integer", "a float",
                                              "a string",  "an array of strings"};
  return fmt::format("{} ({})", toml_text(v), what[v.index()]);
}

std::string expected(Kind kind, std::span<const std::string_view> allowed) {
  switch (kind) {
    case Kind::integer: return "an integer";
    case Kind::unsigned_integer: return "a non-negative integer";
    case Kind::floating: return "a number";
    case Kind::boolean: return "a boolean (true or false)";
    case Kind::string: return "a string";
    case Kind::enumeration: return fmt::format("one of {}", fmt::join(allowed, ", "));
    case Kind::string_list: return "an array of strings";
  }
  return "?";
}

std::string expected(const KeySpec& k) { return expected(k.kind, k.allowed); }

// ---- Scalar <-> field -------------------------------------------------------------------------

template <class T>
constexpr Kind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return Kind::boolean;
  else if constexpr (std::is_same_v<T, int>) return Kind::integer;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return Kind::unsigned_integer;
  else if constexpr (std::is_same_v<T, double>) return Kind::floating;
  else if constexpr (std::is_same_v<T, std::string>) return Kind::string;
  else if constexpr (std::is_same_v<T, StringList>) return Kind::string_list;
  else {
    static_assert(std::is_enum_v<T>, "config field of a type the key table does not know");
    return Kind::enumeration;
  }
}

template <class T>
Scalar to_scalar(const T& v) {
  if constexpr (std::is_same_v<T, int>) return static_cast<std::int64_t>(v);
  else if constexpr (std::is_enum_v<T>) return std::string(to_string(v));
  else return v;
}

template <class T>
std::span<const std::string_view> allowed_of() {
  if constexpr (std::is_enum_v<T>) return enum_names<T>();
  else return {};
}

// Integer fields: any integer value in range; a float (even 2.0) is refused.
template <class T>
std::optional<std::string> integer_from(const Scalar& v, T& out) {
  const auto store = [&out](auto i) -> std::optional<std::string> {
    if (!std::in_range<T>(i))
      return fmt::format("{} is out of range ({} .. {})", i, std::numeric_limits<T>::min(),
                         std::numeric_limits<T>::max());
    out = static_cast<T>(i);
    return std::nullopt;
  };
  if (const auto* i = std::get_if<std::int64_t>(&v)) return store(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v)) return store(*u);
  return fmt::format("expected {}, got {}", expected(kind_of<T>(), {}), describe(v));
}

// Stores `v` into `out` when it has the right type and range; otherwise leaves `out` alone and
// returns what is wrong.
template <class T>
std::optional<std::string> convert(const Scalar& v, T& out) {
  const auto mismatch = [&] {
    return fmt::format("expected {}, got {}", expected(kind_of<T>(), allowed_of<T>()), describe(v));
  };
  if constexpr (std::is_same_v<T, int> || std::is_same_v<T, std::uint64_t>) {
    return integer_from(v, out);
  } else if constexpr (std::is_same_v<T, double>) {
    // Float keys accept integers: `lr = 1` means 1.0.
    if (const auto* d = std::get_if<double>(&v)) out = *d;
    else if (const auto* i = std::get_if<std::int64_t>(&v)) out = static_cast<double>(*i);
    else if (const auto* u = std::get_if<std::uint64_t>(&v)) out = static_cast<double>(*u);
    else return mismatch();
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, bool>) {
    if (const auto* x = std::get_if<T>(&v)) {
      out = *x;
      return std::nullopt;
    }
    return mismatch();
  } else if constexpr (std::is_same_v<T, std::string>) {
    const auto* x = std::get_if<T>(&v);
    if (x == nullptr) return mismatch();
    // TOML and JSON text is UTF-8: a value that is not (a raw byte path from an override) could
    // not be written back to the run's config.toml nor into a checkpoint's JSON metadata.
    if (const long at = detail::first_invalid_utf8(*x); at >= 0)
      return fmt::format("not valid UTF-8 (byte {} of the value)", at);
    out = *x;
    return std::nullopt;
  } else if constexpr (std::is_same_v<T, StringList>) {
    const auto* x = std::get_if<T>(&v);
    if (x == nullptr) return mismatch();
    for (std::size_t i = 0; i < x->size(); ++i)
      if (const long at = detail::first_invalid_utf8((*x)[i]); at >= 0)
        return fmt::format("entry {} is not valid UTF-8 (byte {})", i + 1, at);
    out = *x;
    return std::nullopt;
  } else {
    const auto* s = std::get_if<std::string>(&v);
    if (s == nullptr) return mismatch();
    if (const auto e = enum_from_string<T>(*s)) {
      out = *e;
      return std::nullopt;
    }
    return fmt::format("unknown value {} (allowed: {})", quote(*s),
                       fmt::join(allowed_of<T>(), ", "));
  }
}

// The key bound to field `field` of section `sec`, with its own checks (key_checks.h) after the
// enum-membership check every enumeration key has.
template <class S, class T, class... Checks>
KeySpec make_key(std::string_view section, S Config::*sec, std::string_view name, T S::*field,
                 std::string_view fixed_on_resume, Checks... checks) {
  KeySpec k;
  k.section = section;
  k.name = name;
  k.full = fmt::format("{}.{}", section, name);
  k.kind = kind_of<T>();
  k.allowed = allowed_of<T>();
  k.get = [sec, field](const Config& c) { return to_scalar((c.*sec).*field); };
  k.set = [sec, field](Config& c, const Scalar& v) { return convert(v, (c.*sec).*field); };
  k.fixed_on_resume = fixed_on_resume;
  if constexpr (std::is_enum_v<T>)
    k.checks.push_back([full = k.full, sec, field](const Config& c, Problems& out) {
      check::valid_enum(full, (c.*sec).*field, out);
    });
  (k.checks.push_back([full = k.full, sec, field, checks](const Config& c, Problems& out) {
    checks(full, (c.*sec).*field, c, out);
  }),
   ...);
  return k;
}

// ---- The table --------------------------------------------------------------------------------

// NL_KEY(model, n_layer, shapes, positive()): key "model.n_layer" bound to Config::model.n_layer,
// which a resumed run may not change because it changes the parameter shapes (the third argument:
// one of the reasons below, or `resumable`), and whose value must be > 0 (the checks that follow,
// from key_checks.h; an enumeration key's membership check needs no mention).
#define NL_KEY(section, field, on_resume, ...)                                     \
  make_key(#section, &Config::section, #field, &decltype(Config::section)::field, \
           resume::on_resume __VA_OPT__(, ) __VA_ARGS__)

// Whether a resumed run (`train --resume RUN --set key=value`) may change a key. It may when the
// change alters only how training goes on from the checkpoint: the length of the run, the
// learning-rate schedule and the optimizer settings that do not define the saved moments, logging,
// evaluation, checkpoints, diagnostics, the guards, threads and reduction settings. It may not
// when the change would alter what the checkpoint holds or what the run trains on; the reason
// names what, for the refusal "<key> cannot change on resume: it changes <reason>".
namespace resume {
constexpr std::string_view resumable = "";
constexpr std::string_view shapes = "the parameter shapes";
constexpr std::string_view model_fn = "the model the checkpoint was trained as";
constexpr std::string_view moments = "the meaning of the saved optimizer moments";
constexpr std::string_view optimizer = "the optimizer whose state the checkpoint holds (start a new run "
                                       "from it with --init-from, which starts a fresh state)";
constexpr std::string_view batches = "the batches the run draws";
constexpr std::string_view start = "how the run started (initialization and data order)";
constexpr std::string_view objective = "the training objective";
constexpr std::string_view data = "the training and validation data";
}  // namespace resume

// Checks of one key that need more than a bound.
namespace {

// model.n_head: > 0, or 0 when head_dim derives it (apply_implied_defaults; 0 remains only when
// head_dim is unset or does not divide d_model, which the message says).
void heads_or_derived(std::string_view key, int v, const Config& c, Problems& out) {
  if (v == 0)
    out.push_back(fmt::format("model.n_head = 0 must be > 0, unless model.head_dim divides "
                              "model.d_model = {} (head_dim = {}): then 0 asks for d_model / "
                              "head_dim heads",
                              c.model.d_model, c.model.head_dim));
  else
    check::positive()(key, v, c, out);
}

bool under_ngpt(const Config& c) { return c.model.placement == Placement::ngpt; }

// source.unknown: every entry a valid key outside [source] (source.cpp).
void known_keys(std::string_view, const StringList&, const Config& c, Problems& out) {
  for (auto& p : detail::source_unknown_errors(c.source)) out.push_back(std::move(p));
}

// TOML integers are signed 64-bit; a larger seed could not be written back to a config file.
constexpr auto max_toml_integer =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());

}  // namespace

const std::vector<KeySpec>& key_table() {
  using namespace check;
  static const std::vector<KeySpec> table = {
      NL_KEY(model, vocab_size, shapes, positive()),
      NL_KEY(model, n_layer, shapes, positive()),
      NL_KEY(model, d_model, shapes, positive()),
      NL_KEY(model, n_head, shapes, heads_or_derived),
      NL_KEY(model, n_kv_head, shapes, non_negative()),
      NL_KEY(model, head_dim, shapes, non_negative()),
      NL_KEY(model, d_ff, shapes, positive()),
      NL_KEY(model, d_ff_mult, shapes, non_negative()),
      NL_KEY(model, seq_len, batches, positive()),
      NL_KEY(model, placement, model_fn),
      NL_KEY(model, mix_ratio, model_fn, in_closed(0, 1)),
      NL_KEY(model, norm, model_fn),
      NL_KEY(model, norm_eps, model_fn, positive()),
      NL_KEY(model, norm_bias, shapes),
      NL_KEY(model, norm_gain_offset, model_fn, is_finite()),
      // DyT / Derf: a positive finite initial alpha (the papers' range; 0 would start every site
      // at its bias).
      NL_KEY(model, dyt_alpha_attn, model_fn, positive()),
      NL_KEY(model, dyt_alpha_mlp, model_fn, positive()),
      NL_KEY(model, dyt_alpha_final, model_fn, positive()),
      NL_KEY(model, dyt_alpha_qk, model_fn, positive()),
      NL_KEY(model, residual_scale, shapes),
      // The residual branch scale: any finite initial value (0 is ReZero's and x-transformers'
      // LayerScale's).
      NL_KEY(model, layerscale_init, model_fn, is_finite()),
      NL_KEY(model, skipinit_init, model_fn, is_finite()),
      NL_KEY(model, attn_gate, shapes),
      NL_KEY(model, attn_sink, shapes),
      NL_KEY(model, sigma_reparam, shapes),
      // nGPT's eigen learning rates start positive (only read under placement = ngpt).
      NL_KEY(model, ngpt_alpha_init, model_fn, when(under_ngpt, positive())),
      NL_KEY(model, qk_norm, shapes),
      NL_KEY(model, qk_norm_scope, shapes),
      NL_KEY(model, qk_norm_position, model_fn),
      NL_KEY(model, pos, shapes),
      NL_KEY(model, rope_theta, model_fn, positive()),
      NL_KEY(model, rope_scaling, model_fn),
      NL_KEY(model, rope_factor, model_fn, positive()),
      NL_KEY(model, rope_low_freq_factor, model_fn, positive()),
      NL_KEY(model, rope_high_freq_factor, model_fn, positive()),
      NL_KEY(model, rope_original_seq_len, model_fn, positive()),
      NL_KEY(model, sliding_window, model_fn, non_negative()),
      NL_KEY(model, layer_pattern, model_fn),
      NL_KEY(model, rope_local_theta, model_fn, non_negative()),
      NL_KEY(model, mlp, shapes),
      NL_KEY(model, bias, shapes),
      NL_KEY(model, attn_qkv_bias, shapes),
      NL_KEY(model, attn_out_bias, shapes),
      NL_KEY(model, mlp_bias, shapes),
      NL_KEY(model, tie_embeddings, shapes),
      NL_KEY(model, attn_softcap, model_fn, non_negative()),
      NL_KEY(model, final_softcap, model_fn, non_negative()),
      NL_KEY(model, attn_scale, model_fn, non_negative()),
      NL_KEY(model, embed_scale, model_fn, positive()),
      NL_KEY(model, init, model_fn),
      NL_KEY(model, init_std, model_fn, positive()),
      NL_KEY(model, embed_init_std, model_fn, non_negative()),
      NL_KEY(model, admin_omega, model_fn),
      NL_KEY(model, hybrid_first_pre, shapes),
      NL_KEY(model, parametrization, model_fn),
      NL_KEY(model, mup_base_width, model_fn, non_negative()),
      NL_KEY(model, mup_base_d_ff, model_fn, non_negative()),
      NL_KEY(model, mup_base_head_dim, model_fn, non_negative()),
      NL_KEY(model, mup_output_mult, model_fn, positive()),

      NL_KEY(optim, name, optimizer),
      NL_KEY(optim, lr, resumable, positive()),
      NL_KEY(optim, min_lr_ratio, resumable, in_closed(0, 1)),
      NL_KEY(optim, beta1, moments, in_half_open(0, 1)),
      NL_KEY(optim, beta2, moments, in_half_open(0, 1)),
      NL_KEY(optim, eps, resumable, positive()),
      NL_KEY(optim, weight_decay, resumable, non_negative()),
      NL_KEY(optim, decay_embeddings, resumable),
      NL_KEY(optim, grad_clip, resumable, non_negative()),
      NL_KEY(optim, warmup_steps, resumable, non_negative()),
      NL_KEY(optim, schedule, resumable),
      NL_KEY(optim, adamw_lr, resumable, non_negative()),
      NL_KEY(optim, momentum, moments, in_half_open(0, 1)),
      NL_KEY(optim, nesterov, resumable),
      NL_KEY(optim, ns_steps, resumable, positive(), less_than(100, "(as torch.optim.Muon)")),
      NL_KEY(optim, ns_a, resumable),
      NL_KEY(optim, ns_b, resumable),
      NL_KEY(optim, ns_c, resumable),
      NL_KEY(optim, ns_eps, resumable, positive()),
      NL_KEY(optim, adjust_lr, resumable),
      NL_KEY(optim, atan2_a, resumable, positive()),
      NL_KEY(optim, atan2_b, resumable, positive()),
      NL_KEY(optim, adafactor_beta2_decay, moments, at_most(0.0, "(as torch.optim.Adafactor)")),
      NL_KEY(optim, adafactor_eps1, resumable, non_negative()),
      NL_KEY(optim, adafactor_eps2, resumable, non_negative()),
      NL_KEY(optim, adafactor_d, resumable, at_least(1.0)),
      NL_KEY(optim, soap_shampoo_beta, moments, less_than(1.0, "(< 0: optim.beta2)")),
      NL_KEY(optim, soap_precondition_frequency, resumable, positive()),
      NL_KEY(optim, soap_max_precond_dim, optimizer, positive()),
      NL_KEY(optim, soap_normalize_grads, resumable),
      NL_KEY(optim, soap_correct_bias, resumable),
      NL_KEY(optim, qk_clip, resumable, non_negative()),
      NL_KEY(optim, qk_clip_alpha, resumable, in_closed(0, 1)),

      NL_KEY(train, seed, start, at_most(max_toml_integer, "(the largest TOML integer)")),
      NL_KEY(train, z_loss, objective, non_negative()),
      // 0 would "finish" with no step, no end event, no checkpoint.
      NL_KEY(train, steps, resumable, at_least(1)),
      NL_KEY(train, batch_size, batches, positive()),
      NL_KEY(train, grad_accum, batches, positive()),
      NL_KEY(train, eval_interval, resumable, non_negative()),
      NL_KEY(train, eval_batches, resumable, non_negative()),
      NL_KEY(train, log_interval, resumable, non_negative()),
      NL_KEY(train, checkpoint_interval, resumable, non_negative()),
      NL_KEY(train, keep_checkpoints, resumable, at_least(1)),
      NL_KEY(train, threads, resumable, non_negative()),
      NL_KEY(train, spike_policy, resumable),
      NL_KEY(train, spike_window, resumable, greater_than(1)),
      NL_KEY(train, spike_threshold, resumable, positive()),
      NL_KEY(train, max_bad_steps, resumable, positive()),
      NL_KEY(train, matmul_precision, resumable),
      NL_KEY(train, init_from, start),
      NL_KEY(train, data_seed, resumable),
      NL_KEY(train, stop_at, resumable, non_negative()),

      NL_KEY(data, path, data),
      NL_KEY(data, path_from_run, data),
      NL_KEY(data, val_fraction, data, in_half_open(0, 1)),
      NL_KEY(data, tokenizer, data),

      NL_KEY(diag, interval, resumable, non_negative()),
      NL_KEY(diag, per_head, resumable),

      NL_KEY(dist, deterministic, resumable),
      NL_KEY(dist, bucket_size, resumable, positive()),

      // Where the run came from: it describes the run, so a resume (which only normlab runs
      // have) may restate it.
      NL_KEY(source, kind, resumable),
      NL_KEY(source, trainer, resumable),
      NL_KEY(source, unknown, resumable, known_keys),
      NL_KEY(source, world_size, resumable, positive()),
      NL_KEY(source, sharding, resumable),
  };
  return table;
}
#undef NL_KEY

// Section names in table order.
std::vector<std::string_view> section_names() {
  std::vector<std::string_view> out;
  for (const auto& k : key_table())
    if (std::find(out.begin(), out.end(), k.section) == out.end()) out.push_back(k.section);
  return out;
}

bool is_section(std::string_view name) {
  const auto s = section_names();
  return std::find(s.begin(), s.end(), name) != s.end();
}

const KeySpec* find_key(std::string_view section, std::string_view name) {
  for (const auto& k : key_table())
    if (k.section == section && k.name == name) return &k;
  return nullptr;
}

void check_keys(const Config& c, std::string_view section, Problems& out) {
  for (const auto& k : key_table())
    if (section.empty() || k.section == section)
      for (const auto& check : k.checks) check(c, out);
}

}  // namespace normlab::keytab

namespace normlab {

std::vector<std::string> resumable_keys() {
  std::vector<std::string> out;
  for (const auto& k : keytab::key_table())
    if (k.fixed_on_resume.empty()) out.push_back(k.full);
  return out;
}

void check_resume_config(const Config& saved, const Config& next) {
  std::vector<std::string> problems;
  for (const auto& k : keytab::key_table()) {
    const keytab::Scalar was = k.get(saved), now = k.get(next);
    if (k.fixed_on_resume.empty() || was == now) continue;
    problems.push_back(fmt::format("{} cannot change on resume: it changes {} (saved {}, given {})",
                                   k.full, k.fixed_on_resume, keytab::toml_text(was),
                                   keytab::toml_text(now)));
  }
  if (!problems.empty()) throw ConfigError(std::move(problems));
}

}  // namespace normlab
