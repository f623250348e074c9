// The table of configuration keys and what every front end needs from it: each key bound to its
// Config field once (its section and name are the stringified member names, so they cannot drift),
// conversions between fields and neutral Scalars with type checks, the TOML text of a value, the
// "did you mean" suggestions for unknown names; the table of other trainers' names (nanoGPT,
// Hugging Face, OLMo) with the normlab key or what normlab does instead is keys_foreign.cpp.
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

template <class S, class T>
KeySpec make_key(std::string_view section, S Config::*sec, std::string_view name, T S::*field,
                 std::string_view fixed_on_resume) {
  KeySpec k;
  k.section = section;
  k.name = name;
  k.full = fmt::format("{}.{}", section, name);
  k.kind = kind_of<T>();
  k.allowed = allowed_of<T>();
  k.get = [sec, field](const Config& c) { return to_scalar((c.*sec).*field); };
  k.set = [sec, field](Config& c, const Scalar& v) { return convert(v, (c.*sec).*field); };
  k.fixed_on_resume = fixed_on_resume;
  return k;
}

// ---- The table --------------------------------------------------------------------------------

// NL_KEY(model, n_layer, shapes): key "model.n_layer" bound to Config::model.n_layer, which a
// resumed run may not change because it changes the parameter shapes (the third argument: one of
// the reasons below, or `resumable`).
#define NL_KEY(section, field, on_resume) \
  make_key(#section, &Config::section, #field, &decltype(Config::section)::field, \
           resume::on_resume)

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

const std::vector<KeySpec>& key_table() {
  static const std::vector<KeySpec> table = {
      NL_KEY(model, vocab_size, shapes),
      NL_KEY(model, n_layer, shapes),
      NL_KEY(model, d_model, shapes),
      NL_KEY(model, n_head, shapes),
      NL_KEY(model, n_kv_head, shapes),
      NL_KEY(model, head_dim, shapes),
      NL_KEY(model, d_ff, shapes),
      NL_KEY(model, d_ff_mult, shapes),
      NL_KEY(model, seq_len, batches),
      NL_KEY(model, placement, model_fn),
      NL_KEY(model, mix_ratio, model_fn),
      NL_KEY(model, norm, model_fn),
      NL_KEY(model, norm_eps, model_fn),
      NL_KEY(model, norm_bias, shapes),
      NL_KEY(model, norm_gain_offset, model_fn),
      NL_KEY(model, dyt_alpha_attn, model_fn),
      NL_KEY(model, dyt_alpha_mlp, model_fn),
      NL_KEY(model, dyt_alpha_final, model_fn),
      NL_KEY(model, dyt_alpha_qk, model_fn),
      NL_KEY(model, residual_scale, shapes),
      NL_KEY(model, layerscale_init, model_fn),
      NL_KEY(model, skipinit_init, model_fn),
      NL_KEY(model, attn_gate, shapes),
      NL_KEY(model, attn_sink, shapes),
      NL_KEY(model, sigma_reparam, shapes),
      NL_KEY(model, ngpt_alpha_init, model_fn),
      NL_KEY(model, qk_norm, shapes),
      NL_KEY(model, qk_norm_scope, shapes),
      NL_KEY(model, qk_norm_position, model_fn),
      NL_KEY(model, pos, shapes),
      NL_KEY(model, rope_theta, model_fn),
      NL_KEY(model, rope_scaling, model_fn),
      NL_KEY(model, rope_factor, model_fn),
      NL_KEY(model, rope_low_freq_factor, model_fn),
      NL_KEY(model, rope_high_freq_factor, model_fn),
      NL_KEY(model, rope_original_seq_len, model_fn),
      NL_KEY(model, sliding_window, model_fn),
      NL_KEY(model, layer_pattern, model_fn),
      NL_KEY(model, rope_local_theta, model_fn),
      NL_KEY(model, mlp, shapes),
      NL_KEY(model, bias, shapes),
      NL_KEY(model, attn_qkv_bias, shapes),
      NL_KEY(model, attn_out_bias, shapes),
      NL_KEY(model, mlp_bias, shapes),
      NL_KEY(model, tie_embeddings, shapes),
      NL_KEY(model, attn_softcap, model_fn),
      NL_KEY(model, final_softcap, model_fn),
      NL_KEY(model, attn_scale, model_fn),
      NL_KEY(model, embed_scale, model_fn),
      NL_KEY(model, init, model_fn),
      NL_KEY(model, init_std, model_fn),
      NL_KEY(model, embed_init_std, model_fn),
      NL_KEY(model, admin_omega, model_fn),
      NL_KEY(model, hybrid_first_pre, shapes),
      NL_KEY(model, parametrization, model_fn),
      NL_KEY(model, mup_base_width, model_fn),
      NL_KEY(model, mup_base_d_ff, model_fn),
      NL_KEY(model, mup_base_head_dim, model_fn),
      NL_KEY(model, mup_output_mult, model_fn),

      NL_KEY(optim, name, optimizer),
      NL_KEY(optim, lr, resumable),
      NL_KEY(optim, min_lr_ratio, resumable),
      NL_KEY(optim, beta1, moments),
      NL_KEY(optim, beta2, moments),
      NL_KEY(optim, eps, resumable),
      NL_KEY(optim, weight_decay, resumable),
      NL_KEY(optim, decay_embeddings, resumable),
      NL_KEY(optim, grad_clip, resumable),
      NL_KEY(optim, warmup_steps, resumable),
      NL_KEY(optim, schedule, resumable),
      NL_KEY(optim, adamw_lr, resumable),
      NL_KEY(optim, momentum, moments),
      NL_KEY(optim, nesterov, resumable),
      NL_KEY(optim, ns_steps, resumable),
      NL_KEY(optim, ns_a, resumable),
      NL_KEY(optim, ns_b, resumable),
      NL_KEY(optim, ns_c, resumable),
      NL_KEY(optim, ns_eps, resumable),
      NL_KEY(optim, adjust_lr, resumable),
      NL_KEY(optim, atan2_a, resumable),
      NL_KEY(optim, atan2_b, resumable),
      NL_KEY(optim, adafactor_beta2_decay, moments),
      NL_KEY(optim, adafactor_eps1, resumable),
      NL_KEY(optim, adafactor_eps2, resumable),
      NL_KEY(optim, adafactor_d, resumable),
      NL_KEY(optim, qk_clip, resumable),
      NL_KEY(optim, qk_clip_alpha, resumable),

      NL_KEY(train, seed, start),
      NL_KEY(train, z_loss, objective),
      NL_KEY(train, steps, resumable),
      NL_KEY(train, batch_size, batches),
      NL_KEY(train, grad_accum, batches),
      NL_KEY(train, eval_interval, resumable),
      NL_KEY(train, eval_batches, resumable),
      NL_KEY(train, log_interval, resumable),
      NL_KEY(train, checkpoint_interval, resumable),
      NL_KEY(train, keep_checkpoints, resumable),
      NL_KEY(train, threads, resumable),
      NL_KEY(train, spike_policy, resumable),
      NL_KEY(train, spike_window, resumable),
      NL_KEY(train, spike_threshold, resumable),
      NL_KEY(train, max_bad_steps, resumable),
      NL_KEY(train, matmul_precision, resumable),
      NL_KEY(train, init_from, start),
      NL_KEY(train, data_seed, resumable),
      NL_KEY(train, stop_at, resumable),

      NL_KEY(data, path, data),
      NL_KEY(data, path_from_run, data),
      NL_KEY(data, val_fraction, data),
      NL_KEY(data, tokenizer, data),

      NL_KEY(diag, interval, resumable),
      NL_KEY(diag, per_head, resumable),

      NL_KEY(dist, deterministic, resumable),
      NL_KEY(dist, bucket_size, resumable),

      // Where the run came from: it describes the run, so a resume (which only normlab runs
      // have) may restate it.
      NL_KEY(source, kind, resumable),
      NL_KEY(source, trainer, resumable),
      NL_KEY(source, unknown, resumable),
      NL_KEY(source, world_size, resumable),
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

// ---- Suggestions ------------------------------------------------------------------------------

// Optimal string alignment distance: Levenshtein plus adjacent transpositions ("modle" -> "model").
// Exact whenever it could pass close_enough() with either string as the query; when the lengths
// alone differ by more than half the longer one, that difference (a lower bound, and too far for
// a suggestion either way) is returned without the O(n m) table, so a 100 KB key from a hostile
// file costs no more than a short one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  const std::size_t diff = n > m ? n - m : m - n;
  if (diff > std::max<std::size_t>(2, std::max(n, m) / 2)) return diff;
  // Three rolling rows of the (n + 1) x (m + 1) table: i - 2, i - 1, i.
  std::vector<std::size_t> rows(3 * (m + 1));
  auto row = [&](std::size_t i) { return rows.data() + (i % 3) * (m + 1); };
  for (std::size_t j = 0; j <= m; ++j) row(0)[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    std::size_t *cur = row(i), *prev = row(i - 1), *prev2 = row(i + 1);  // (i + 1) % 3 == (i - 2) % 3
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
  }
  return row(n)[m];
}

// A third of the name, at least two edits; one for names of up to three letters, of which two
// edits would leave one ("eps" is not "pos").
bool close_enough(std::size_t distance, std::string_view query) {
  return distance <= (query.size() <= 3 ? 1 : std::max<std::size_t>(2, query.size() / 3));
}

std::string did_you_mean(const std::optional<std::string>& s) {
  return s ? fmt::format(" (did you mean '{}'?)", *s) : std::string();
}

std::string did_you_mean(const std::vector<std::string>& keys) {
  if (keys.empty()) return {};
  std::string list = fmt::format("'{}'", keys[0]);
  for (std::size_t i = 1; i < keys.size(); ++i)
    list += fmt::format("{}'{}'", i + 1 == keys.size() ? " or " : ", ", keys[i]);
  return fmt::format(" (did you mean {}?)", list);
}

namespace {

// Whether `part` occurs in `whole` as whole words of a snake_case name ("warmup" in
// "warmup_steps", "window" in "sliding_window", not "pos" in "position").
bool contains_words(std::string_view whole, std::string_view part) {
  for (std::size_t at = whole.find(part); at != std::string_view::npos;
       at = whole.find(part, at + 1)) {
    const std::size_t end = at + part.size();
    if ((at == 0 || whole[at - 1] == '_') && (end == whole.size() || whole[end] == '_'))
      return true;
  }
  return false;
}

// How near the unknown name comes to key name `key`, as (kind, distance), smaller being nearer;
// nothing when it is not near at all. Kinds: 0 the same name, 1 a few edits away (close_enough),
// 2 a prefix of the key's name (`warmup` -> `warmup_steps`), 3 whole words of the key's name or
// the key's name among the words typed (`window` -> `sliding_window`, `adam_eps` -> `eps`). The
// distance orders kinds 0 and 1 only: every prefix or word match is as near as any other.
using Nearness = std::pair<int, std::size_t>;
std::optional<Nearness> nearness(std::string_view key, std::string_view name) {
  if (name == key) return Nearness{0, 0};
  const std::size_t d = edit_distance(name, key);
  if (close_enough(d, name)) return Nearness{1, d};
  if (name.size() >= 2 && key.starts_with(name)) return Nearness{2, 0};
  if ((name.size() >= 2 && contains_words(key, name)) ||
      (key.size() >= 3 && contains_words(name, key)))
    return Nearness{3, 0};
  return std::nullopt;
}

}  // namespace

// The nearest valid keys to `section.name`. The nearest ones of the same section (of every
// section when none is given), up to three that tie (`optim.beta` -> beta1, beta2); a key of the
// very same name in another section (`train.lr` -> `optim.lr`), before them unless they are a few
// edits away (`model.eps` -> `optim.eps`, `model.norm_eps`); and only when neither exists, the
// nearest ones of the other sections (`train.warmup` -> `optim.warmup_steps`).
std::vector<std::string> nearest_keys(std::string_view section, std::string_view name) {
  struct Best {
    std::optional<Nearness> n;
    std::vector<std::string> keys;
    void offer(const Nearness& x, const std::string& key) {
      if (!n || x < *n) n = x, keys = {key};
      else if (x == *n && keys.size() < 3) keys.push_back(key);
    }
  } same, other;
  std::vector<std::string> same_name;  // in another section
  for (const auto& k : key_table()) {
    const bool here = section.empty() || k.section == section;
    std::optional<Nearness> n = nearness(k.name, name);
    if (section.empty()) {  // "model_n_layer": against the full name too
      const std::size_t d = edit_distance(name, k.full);
      if (close_enough(d, name) && (!n || Nearness{1, d} < *n)) n = Nearness{1, d};
    }
    if (!n) continue;
    if (!here && n->first == 0) same_name.push_back(k.full);
    else (here ? same : other).offer(*n, k.full);
  }
  if (same_name.empty()) return !same.keys.empty() ? same.keys : other.keys;
  std::vector<std::string> out = same.n && same.n->first <= 1 ? same.keys : same_name;
  const auto& rest = same.n && same.n->first <= 1 ? same_name : same.keys;
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

// ---- Unknown names (the table of other trainers' names is keys_foreign.cpp) ----------------

std::string unknown_key_message(std::string_view section, std::string_view name) {
  const std::string full =
      section.empty() ? std::string(name) : fmt::format("{}.{}", section, name);
  if (const ForeignKey* f = find_foreign_key(name)) {
    if (f->normlab.empty()) return fmt::format("key '{}' is not supported: {}", full, f->note);
    return fmt::format("unknown key '{}': normlab calls it '{}'{}", full, f->normlab,
                       f->note.empty() ? std::string() : fmt::format(" ({})", f->note));
  }
  return fmt::format("unknown key '{}'{}", full, did_you_mean(nearest_keys(section, name)));
}

// The nearest section: a few edits away, else one that begins the name or that the name begins
// (`[training]` -> train, `[optimizer]` -> optim, `[opt]` -> optim).
std::optional<std::string> nearest_section(std::string_view name) {
  std::optional<std::string> best;
  std::size_t best_d = std::numeric_limits<std::size_t>::max();
  for (const auto s : section_names()) {
    const std::size_t d = edit_distance(name, s);
    if (d < best_d) best_d = d, best = std::string(s);
  }
  if (close_enough(best_d, name)) return best;
  for (const auto s : section_names())
    if ((name.size() >= 3 && s.starts_with(name)) || name.starts_with(s)) return std::string(s);
  return std::nullopt;
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
