// The table of configuration keys and what every front end needs from it: each key bound to its
// Config field once (its section and name are the stringified member names, so they cannot drift),
// conversions between fields and neutral Scalars with type checks, the TOML text of a value, each
// key's own checks (key_checks.h); the "did you mean" suggestions for unknown names are
// keys_suggest.cpp, the table of other trainers' names (nanoGPT, Hugging Face, OLMo) with the
// normlab key or what normlab does instead keys_foreign.cpp.
#include "config/keys.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

#include "config/key_convert.h"
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

namespace {

// The keys of the optimizers' sections, as their files declare them (register_option_key), and
// whether key_table() has been built from them.
struct OptionRegistry {
  std::vector<KeySpec> keys;
  bool frozen = false;
};
OptionRegistry& option_registry() {
  static OptionRegistry r;
  return r;
}

// Every key of the fixed table, with the declared keys after their section's last fixed key: the
// model components' after [model]'s (by name), the optimizers' sections after [optim]'s (ordered
// by optim.name's enum, each section's keys in the order its file declares them).
std::vector<KeySpec> with_option_sections(std::vector<KeySpec> fixed) {
  OptionRegistry& reg = option_registry();
  reg.frozen = true;
  std::vector<KeySpec> model, optim;
  for (const KeySpec& k : reg.keys) (k.section == "model" ? model : optim).push_back(k);
  std::sort(model.begin(), model.end(),
            [](const KeySpec& a, const KeySpec& b) { return a.name < b.name; });
  const auto rank = [](const KeySpec& k) {
    const auto owner = enum_from_string<OptimizerKind>(std::string_view(k.section).substr(6));
    return owner ? static_cast<int>(*owner) : -1;
  };
  std::stable_sort(optim.begin(), optim.end(),
                   [&](const KeySpec& a, const KeySpec& b) { return rank(a) < rank(b); });
  for (auto* part : {&model, &optim}) {
    const std::string_view parent = part == &model ? "model" : "optim";
    const auto last = std::find_if(fixed.rbegin(), fixed.rend(),
                                   [&](const KeySpec& k) { return k.section == parent; });
    fixed.insert(last.base(), std::make_move_iterator(part->begin()),
                 std::make_move_iterator(part->end()));
  }
  return fixed;
}

}  // namespace

void register_option_key(KeySpec k) {
  OptionRegistry& reg = option_registry();
  const bool optimizers = std::string_view(k.section).substr(0, 6) == "optim." &&
                          enum_from_string<OptimizerKind>(std::string_view(k.section).substr(6));
  if (reg.frozen || !(optimizers || k.section == "model")) {
    fmt::print(stderr, "normlab: internal error: declared key {} {}\n", k.full,
               reg.frozen ? "registered after the key table was built"
                          : "is neither in [model] nor in [optim.<an optim.name value>]");
    std::abort();
  }
  reg.keys.push_back(std::move(k));
}

const std::vector<KeySpec>& key_table() {
  using namespace check;
  static const std::vector<KeySpec> table = with_option_sections({
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
  });
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
  // An earlier name ("optim.momentum"): read as the key it became.
  for (const auto& k : key_table())
    if (k.legacy.size() == section.size() + 1 + name.size() && k.legacy.starts_with(section) &&
        k.legacy[section.size()] == '.' && k.legacy.ends_with(name))
      return &k;
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
