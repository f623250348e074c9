// Hugging Face transformers interchange (see hf.h). The formulas each family implements were read
// from transformers 5.x, models/<family>/modeling_<family>.py; docs/interop.md has the table.
#include "io/hf.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "model/plan.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace fs = std::filesystem;

namespace normlab {

std::string_view to_string(HfFamily f) {
  switch (f) {
    case HfFamily::gpt2: return "gpt2";
    case HfFamily::llama: return "llama";
    case HfFamily::gemma2: return "gemma2";
    case HfFamily::gemma3_text: return "gemma3_text";
    case HfFamily::olmo2: return "olmo2";
  }
  return "?";
}

namespace {

using json = nlohmann::json;

// HF activation names by formula (transformers/activations.py, ACT2FN).
bool is_tanh_gelu(const std::string& a) {
  return a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_python_tanh";
}
bool is_erf_gelu(const std::string& a) { return a == "gelu" || a == "gelu_python"; }
bool is_silu(const std::string& a) { return a == "silu" || a == "swish"; }

bool close(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

// ---------------------------------------------------------------------------------------------
// config.json keys with the family's defaults (a key left out of config.json takes the default of
// the transformers config class, as from_pretrained does). Problems are collected, not thrown.

class HfKeys {
 public:
  HfKeys(const json& j, std::string where, std::vector<std::string>& problems)
      : j_(j), where_(std::move(where)), problems_(problems) {}

  const json* raw(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  bool present(const std::string& key) const { return raw(key) != nullptr; }
  std::string show(const std::string& key) const {
    const json* v = raw(key);
    return fmt::format("{}{} = {}", where_, key, v ? v->dump() : "null");
  }
  void refuse(const std::string& key, const std::string& why) {
    problems_.push_back(fmt::format("{}: {}", show(key), why));
  }
  void refuse_value(const std::string& key, const std::string& value, const std::string& why) {
    problems_.push_back(fmt::format("{}{} = {}: {}", where_, key, value, why));
  }

  long integer(const std::string& key, long def) {
    const json* v = raw(key);
    if (!v) return def;
    if (v->is_number_integer()) return v->get<long>();
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>())
      return static_cast<long>(v->get<double>());
    refuse(key, "expected an integer");
    return def;
  }
  std::optional<long> optional_integer(const std::string& key, std::optional<long> def) {
    if (j_.contains(key) && j_.at(key).is_null()) return std::nullopt;
    if (!present(key)) return def;
    return integer(key, 0);
  }
  double number(const std::string& key, double def) {
    const json* v = raw(key);
    if (!v) return def;
    if (v->is_number()) return v->get<double>();
    refuse(key, "expected a number");
    return def;
  }
  // null in config.json means "off" (soft-caps, sliding window).
  std::optional<double> optional_number(const std::string& key, std::optional<double> def) {
    if (j_.contains(key) && j_.at(key).is_null()) return std::nullopt;
    if (!present(key)) return def;
    return number(key, 0.0);
  }
  bool boolean(const std::string& key, bool def) {
    const json* v = raw(key);
    if (!v) return def;
    if (v->is_boolean()) return v->get<bool>();
    refuse(key, "expected true or false");
    return def;
  }
  std::string string(const std::string& key, const std::string& def) {
    const json* v = raw(key);
    if (!v) return def;
    if (v->is_string()) return v->get<std::string>();
    refuse(key, "expected a string");
    return def;
  }
  const std::string& where() const { return where_; }
  std::vector<std::string>& problems() { return problems_; }

 private:
  const json& j_;
  std::string where_;  // "" or "text_config."
  std::vector<std::string>& problems_;
};

// Dropout is training-only in HF (eval mode is exact); normlab has none, so a note, not a refusal.
void note_dropout(HfKeys& k, const std::vector<std::pair<std::string, double>>& keys,
                  std::vector<std::string>& notes) {
  for (const auto& [key, def] : keys) {
    const double p = k.number(key, def);
    if (p != 0.0)
      notes.push_back(fmt::format("{}{} = {} ignored: normlab trains without dropout (HF applies "
                                  "it only in training mode)",
                                  k.where(), key, p));
  }
}

// RoPE base of one rope_parameters entry (transformers 5: {"rope_type", "rope_theta", ...}, flat or
// per layer type) or of the legacy keys (rope_theta / rope_local_base_freq, rope_scaling). Any
// scaled RoPE type is refused.
double read_rope_theta(HfKeys& k, const char* layer_type, const std::string& legacy_theta_key,
                       double default_theta) {
  const json* rp = k.raw("rope_parameters");
  const json* entry = nullptr;
  std::string path = "rope_parameters";
  if (rp && rp->is_object() && !rp->empty()) {
    const bool nested = rp->contains("full_attention") || rp->contains("sliding_attention");
    if (!nested) {
      entry = rp;
    } else if (layer_type && rp->contains(layer_type) && !rp->at(layer_type).is_null()) {
      entry = &rp->at(layer_type);
      path += std::string(".") + layer_type;
    }
  } else if (rp && !rp->is_object()) {
    k.refuse("rope_parameters", "expected an object");
  }
  if (entry) {
    if (!entry->is_object()) {
      k.refuse_value(path, entry->dump(), "expected an object");
      return default_theta;
    }
    std::string type = "default";
    if (entry->contains("rope_type") && entry->at("rope_type").is_string())
      type = entry->at("rope_type").get<std::string>();
    else if (entry->contains("type") && entry->at("type").is_string())
      type = entry->at("type").get<std::string>();
    if (type != "default")
      k.refuse_value(path + ".rope_type", json(type).dump(),
                     "scaled RoPE has no normlab counterpart (normlab: plain RoPE, one base)");
    const json* prf =
        entry->contains("partial_rotary_factor") ? &entry->at("partial_rotary_factor") : nullptr;
    if (prf && prf->is_number() && prf->get<double>() != 1.0)
      k.refuse_value(path + ".partial_rotary_factor", entry->at("partial_rotary_factor").dump(),
                     "normlab rotates every dimension of a head");
    if (entry->contains("rope_theta") && entry->at("rope_theta").is_number())
      return entry->at("rope_theta").get<double>();
    return k.number(legacy_theta_key, default_theta);
  }
  // Legacy keys (transformers 4): rope_scaling applies to the global (full attention) RoPE.
  const bool global = !layer_type || std::string_view(layer_type) != "sliding_attention";
  if (global) {
    if (const json* rs = k.raw("rope_scaling")) {
      std::string type;
      if (rs->is_object()) type = rs->value("rope_type", rs->value("type", std::string("?")));
      if (type != "default")
        k.refuse("rope_scaling", "scaled RoPE has no normlab counterpart (normlab: plain RoPE)");
    }
  }
  if (k.present("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    k.refuse("partial_rotary_factor", "normlab rotates every dimension of a head");
  return k.number(legacy_theta_key, default_theta);
}

// gpt2 (GPT2LMHeadModel): pre-LN with LayerNorm biases, fused Conv1D c_attn, learned positions.
ModelConfig read_gpt2(HfKeys& k, std::vector<std::string>& notes) {
  ModelConfig m;
  m.vocab_size = static_cast<int>(k.integer("vocab_size", 50257));
  m.seq_len =
      static_cast<int>(k.integer("n_positions", k.integer("max_position_embeddings", 1024)));
  m.d_model = static_cast<int>(k.integer("n_embd", k.integer("hidden_size", 768)));
  m.n_layer = static_cast<int>(k.integer("n_layer", k.integer("num_hidden_layers", 12)));
  m.n_head = static_cast<int>(k.integer("n_head", k.integer("num_attention_heads", 12)));
  m.d_ff = static_cast<int>(k.optional_integer("n_inner", std::nullopt).value_or(4L * m.d_model));
  m.placement = Placement::pre;
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.bias = true;
  m.norm_eps = k.number("layer_norm_epsilon", 1e-5);
  m.pos = PosKind::learned;
  m.tie_embeddings = k.boolean("tie_word_embeddings", true);
  const std::string act = k.string("activation_function", "gelu_new");
  if (is_tanh_gelu(act))
    m.mlp = MlpKind::gelu_tanh;
  else if (is_erf_gelu(act))
    m.mlp = MlpKind::gelu;
  else
    k.refuse("activation_function", "normlab's GPT-2 MLP is gelu_new (tanh GELU) or gelu (erf)");
  // scale_attn_weights = false: raw q.k scores (attn_scale = 1).
  m.attn_scale = k.boolean("scale_attn_weights", true) ? 0.0 : 1.0;
  if (k.boolean("scale_attn_by_inverse_layer_idx", false))
    k.refuse("scale_attn_by_inverse_layer_idx", "normlab has no per-layer attention scale");
  if (k.boolean("add_cross_attention", false))
    k.refuse("add_cross_attention", "normlab is decoder-only, without cross-attention");
  note_dropout(k, {{"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}}, notes);
  return m;
}

struct LlamaLikeDefaults {
  long vocab, hidden, inter, layers, heads;
  std::optional<long> kv_heads, head_dim;  // nullopt: = heads, = hidden / heads
  const char* act_key;
  const char* act;
  long max_pos;
  double eps;
  bool tie;
  double theta;
};

// llama, gemma2, gemma3_text, olmo2: separate q/k/v projections, gated MLP, RMSNorm, RoPE.
ModelConfig read_llama_like(HfKeys& k, HfFamily f, int max_seq_len,
                            std::vector<std::string>& notes) {
  static const LlamaLikeDefaults kLlama{32000, 4096, 11008, 32, 32, std::nullopt, std::nullopt,
                                        "hidden_act", "silu", 2048, 1e-6, false, 10000.0};
  static const LlamaLikeDefaults kGemma2{256000, 2304, 9216, 26, 8, 4, 256, "hidden_activation",
                                         "gelu_pytorch_tanh", 8192, 1e-6, true, 10000.0};
  static const LlamaLikeDefaults kGemma3{262208, 2304, 9216, 26, 8, 4, 256, "hidden_activation",
                                         "gelu_pytorch_tanh", 131072, 1e-6, true, 1000000.0};
  static const LlamaLikeDefaults kOlmo2{50304, 4096, 11008, 32, 32, std::nullopt, std::nullopt,
                                        "hidden_act", "silu", 2048, 1e-5, false, 10000.0};
  const bool gemma = f == HfFamily::gemma2 || f == HfFamily::gemma3_text;
  const LlamaLikeDefaults& d = f == HfFamily::llama    ? kLlama
                               : f == HfFamily::gemma2 ? kGemma2
                               : f == HfFamily::olmo2  ? kOlmo2
                                                       : kGemma3;
  ModelConfig m;
  m.vocab_size = static_cast<int>(k.integer("vocab_size", d.vocab));
  m.d_model = static_cast<int>(k.integer("hidden_size", d.hidden));
  m.d_ff = static_cast<int>(k.integer("intermediate_size", d.inter));
  m.n_layer = static_cast<int>(k.integer("num_hidden_layers", d.layers));
  m.n_head = static_cast<int>(k.integer("num_attention_heads", d.heads));
  const long H = m.n_head, C = m.d_model;
  const long kv = k.optional_integer("num_key_value_heads", d.kv_heads).value_or(H);
  if (kv != H)
    k.refuse_value("num_key_value_heads", std::to_string(kv),
                   fmt::format("grouped-query attention has no normlab counterpart (needs "
                               "num_key_value_heads = num_attention_heads = {})", H));
  if (H > 0 && C % H == 0) {
    const long hd = k.optional_integer("head_dim", d.head_dim).value_or(C / H);
    if (hd != C / H)
      k.refuse_value("head_dim", std::to_string(hd),
                     fmt::format("normlab's head dimension is hidden_size / "
                                 "num_attention_heads = {}", C / H));
  }
  m.norm = NormKind::rmsnorm;
  m.norm_eps = k.number("rms_norm_eps", d.eps);
  m.pos = PosKind::rope;
  m.tie_embeddings = k.boolean("tie_word_embeddings", d.tie);

  const std::string act = k.string(d.act_key, d.act);
  if (is_silu(act))
    m.mlp = MlpKind::swiglu;
  else if (is_tanh_gelu(act))
    m.mlp = MlpKind::geglu;
  else
    k.refuse(d.act_key, "normlab's gated MLPs are swiglu (silu) and geglu (tanh GELU)");

  const bool attn_bias = k.boolean("attention_bias", false);
  if (f == HfFamily::llama) {
    const bool mlp_bias = k.boolean("mlp_bias", false);
    if (attn_bias != mlp_bias)
      k.refuse("attention_bias", fmt::format("normlab has biases on every linear layer or on none "
                                             "(mlp_bias = {})", mlp_bias));
    m.bias = attn_bias && mlp_bias;
  } else if (attn_bias) {
    k.refuse("attention_bias", fmt::format("{}'s MLP has no biases; normlab has biases on every "
                                           "linear layer or on none", to_string(f)));
  }
  note_dropout(k, {{"attention_dropout", 0.0}}, notes);
  const std::optional<long> pad_default = gemma                  ? std::optional<long>(0)
                                          : f == HfFamily::olmo2 ? std::optional<long>(1)
                                                                 : std::nullopt;
  if (const auto pad = k.optional_integer("pad_token_id", pad_default))
    notes.push_back(fmt::format("{}pad_token_id = {}: HF's embedding (padding_idx) gives that row "
                                "no gradient from lookups; normlab trains it like any other row; "
                                "the forward pass is the same",
                                k.where(), *pad));

  // Context: max_position_embeddings, capped; sliding-window layers must see the whole context.
  long seq = k.integer("max_position_embeddings", d.max_pos);
  const long max_pos = seq;
  if (seq > max_seq_len) seq = max_seq_len;

  if (f == HfFamily::llama || f == HfFamily::olmo2) {
    m.placement = f == HfFamily::llama ? Placement::pre : Placement::reordered;
    m.rope_theta = read_rope_theta(k, nullptr, "rope_theta", d.theta);
    if (f == HfFamily::olmo2) {
      // Olmo2Attention: q_norm / k_norm over the whole projection (hidden_size), before RoPE.
      m.qk_norm = QKNormKind::rmsnorm;
      m.qk_norm_scope = QKNormScope::full;
      m.qk_norm_position = QKNormPosition::pre_rope;
    }
  } else {
    // Gemma 2 / 3: peri-norm, RMSNorm gain (1 + w) in float32, embeddings * sqrt(hidden_size).
    m.placement = Placement::peri;
    m.norm_gain_offset = 1.0;
    m.embed_scale = std::sqrt(static_cast<double>(C));
    if (k.boolean("use_bidirectional_attention", false))
      k.refuse("use_bidirectional_attention", "normlab's attention is causal");
    const double q = k.number("query_pre_attn_scalar", 256);
    if (!(q > 0))
      k.refuse("query_pre_attn_scalar", "must be > 0");
    else if (H > 0 && C % H == 0 && q != static_cast<double>(C / H))
      m.attn_scale = std::pow(q, -0.5);  // Gemma2Attention.scaling
    const bool g2 = f == HfFamily::gemma2;  // Gemma 2 defaults to caps 30 / 50, Gemma 3 to none
    const std::optional<double> final_cap =
        k.optional_number("final_logit_softcapping", g2 ? std::optional(30.0) : std::nullopt);
    const std::optional<double> attn_cap =
        k.optional_number("attn_logit_softcapping", g2 ? std::optional(50.0) : std::nullopt);
    m.final_softcap = final_cap.value_or(0.0);
    if (f == HfFamily::gemma2) {
      m.attn_softcap = attn_cap.value_or(0.0);
    } else {
      // Gemma3Attention never passes its soft-cap to the attention function.
      if (attn_cap)
        notes.push_back(fmt::format("{} is not applied by transformers' Gemma 3 attention; normlab "
                                    "attn_softcap = 0 computes what HF computes",
                                    k.show("attn_logit_softcapping")));
      m.qk_norm = QKNormKind::rmsnorm;  // Gemma3Attention: q_norm / k_norm per head, before RoPE
      m.qk_norm_scope = QKNormScope::head;
      m.qk_norm_position = QKNormPosition::pre_rope;
    }
    // Layer types: sliding_attention layers see a window and (Gemma 3) their own RoPE base.
    std::vector<std::string> types;
    if (const json* lt = k.raw("layer_types"); lt && lt->is_array()) {
      for (const auto& t : *lt) types.push_back(t.is_string() ? t.get<std::string>() : "?");
      if (static_cast<long>(types.size()) != m.n_layer)
        k.refuse("layer_types", fmt::format("expected {} entries", m.n_layer));
    } else {
      const long pattern =
          f == HfFamily::gemma2
              ? 2
              : k.integer("sliding_window_pattern", k.integer("_sliding_window_pattern", 6));
      for (long i = 0; i < m.n_layer; ++i)
        types.push_back((i + 1) % pattern ? "sliding_attention" : "full_attention");
    }
    std::set<std::string> kinds(types.begin(), types.end());
    for (const auto& t : kinds)
      if (t != "sliding_attention" && t != "full_attention")
        k.refuse_value("layer_types", json(t).dump(), "unknown layer type");
    if (kinds.count("sliding_attention")) {
      const std::optional<long> window = k.optional_integer("sliding_window", 4096);
      if (window && *window < 1) k.refuse("sliding_window", "must be >= 1");
      if (window && *window < seq) {
        notes.push_back(fmt::format("model.seq_len = {} (sliding_window = {}: within the window a "
                                    "sliding layer attends to the whole context, as normlab does)",
                                    *window, *window));
        seq = *window;
      }
    }
    if (f == HfFamily::gemma2) {
      m.rope_theta = read_rope_theta(k, nullptr, "rope_theta", d.theta);
    } else {
      const json* rp = k.raw("rope_parameters");
      if (rp && rp->is_object() && !rp->empty() && !rp->contains("full_attention") &&
          !rp->contains("sliding_attention"))
        k.refuse("rope_parameters", "Gemma 3 expects entries per layer type");
      std::map<std::string, double> theta;
      if (kinds.count("full_attention"))
        theta["full_attention"] = read_rope_theta(k, "full_attention", "rope_theta", 1000000.0);
      if (kinds.count("sliding_attention"))
        theta["sliding_attention"] =
            read_rope_theta(k, "sliding_attention", "rope_local_base_freq", 10000.0);
      if (theta.size() == 2 && theta["full_attention"] != theta["sliding_attention"])
        k.refuse_value("rope_parameters.sliding_attention.rope_theta (rope_local_base_freq)",
                       fmt::format("{}", theta["sliding_attention"]),
                       fmt::format("differs from the full-attention base {}: normlab uses one RoPE "
                                   "base in every layer", theta["full_attention"]));
      m.rope_theta = theta.empty() ? d.theta : theta.begin()->second;
    }
  }
  if (seq < max_pos && seq == max_seq_len)
    notes.push_back(
        fmt::format("model.seq_len = {} (max_position_embeddings = {} capped)", seq, max_pos));
  m.seq_len = static_cast<int>(seq);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Tensors: one file or shards named by model.safetensors.index.json.

class TensorSource {
 public:
  explicit TensorSource(const fs::path& dir) {
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    if (fs::exists(single)) {
      add(SafetensorsFile::open(single.string()));
    } else if (fs::exists(index)) {
      std::ifstream in(index);
      json j;
      try {
        j = json::parse(in);
      } catch (const std::exception& e) {
        throw FormatError(fmt::format("[hf] {}: not valid JSON: {}", index.string(), e.what()));
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw FormatError(fmt::format("[hf] {}: no \"weight_map\" object", index.string()));
      std::set<std::string> shards;
      for (const auto& [name, file] : j["weight_map"].items())
        if (file.is_string()) shards.insert(file.get<std::string>());
      for (const auto& s : shards) {
        if (s.find('/') != std::string::npos || s.find("..") != std::string::npos)
          throw FormatError(fmt::format("[hf] {}: shard name '{}' is not a file of the directory",
                                        index.string(), s));
        add(SafetensorsFile::open((dir / s).string()));
      }
    } else {
      throw FormatError(fmt::format("[hf] {} has neither model.safetensors nor "
                                    "model.safetensors.index.json (pickled .bin files are not "
                                    "read)",
                                    dir.string()));
    }
  }
  const SafetensorsFile* file_of(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : &files_[it->second];
  }
  bool has(const std::string& name) const { return where_.count(name) > 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [n, i] : where_) out.push_back(n);
    return out;
  }

 private:
  void add(SafetensorsFile f) {
    for (const auto& t : f.tensors())
      if (!where_.emplace(t.name, files_.size()).second)
        throw FormatError(fmt::format("[hf] tensor '{}' appears in more than one shard", t.name));
    files_.push_back(std::move(f));
  }
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::size_t> where_;
};

// Rows and columns of the normlab block a link covers.
struct LinkGeom {
  std::int64_t rows, cols;
};
LinkGeom geom(const HfLink& l) {
  std::int64_t numel = 1;
  for (auto d : l.hf_shape) numel *= d;
  const std::int64_t rows = l.hf_shape.size() == 1 ? l.hf_shape[0]
                            : l.transpose          ? l.hf_shape[1]
                                                   : l.hf_shape[0];
  return {rows, numel / rows};
}

// Checks that the links tile the table: each link inside its parameter, every parameter covered
// exactly once. A failure is a bug in hf_links, never the user's fault.
void check_coverage(const std::vector<HfLink>& links, const ParamTable& table) {
  std::map<std::string, std::int64_t> covered;
  for (const HfLink& l : links) {
    const ParamSpec* s = table.find(l.nl_name);
    NL_CHECK(s, "HF link '{}' targets unknown parameter '{}'", l.hf_name, l.nl_name);
    const LinkGeom g = geom(l);
    const std::int64_t cols = s->shape.size() == 1 ? 1 : s->numel / s->shape[0];
    NL_CHECK(g.cols == cols && l.row0 + g.rows <= s->shape[0],
             "HF link '{}' does not fit parameter '{}'", l.hf_name, l.nl_name);
    covered[l.nl_name] += g.rows * g.cols;
  }
  for (const ParamSpec& s : table.specs())
    NL_CHECK(covered[s.name] == s.numel, "parameter '{}' is covered by {} of {} elements of HF "
             "tensors", s.name, covered[s.name], s.numel);
}

// hf (link's shape) -> normlab arena block, or back.
void scatter(const HfLink& l, const ParamSpec& s, const float* hf, float* arena) {
  const LinkGeom g = geom(l);
  float* dst = arena + s.offset + l.row0 * g.cols;
  for (std::int64_t r = 0; r < g.rows; ++r)
    for (std::int64_t c = 0; c < g.cols; ++c)
      dst[r * g.cols + c] = l.transpose ? hf[c * g.rows + r] : hf[r * g.cols + c];
}
void gather(const HfLink& l, const ParamSpec& s, const float* arena, float* hf) {
  const LinkGeom g = geom(l);
  const float* src = arena + s.offset + l.row0 * g.cols;
  for (std::int64_t r = 0; r < g.rows; ++r)
    for (std::int64_t c = 0; c < g.cols; ++c)
      (l.transpose ? hf[c * g.rows + r] : hf[r * g.cols + c]) = src[r * g.cols + c];
}

json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw FormatError(fmt::format("[hf] cannot read {}", p.string()));
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw FormatError(fmt::format("[hf] {}: not valid JSON: {}", p.string(), e.what()));
  }
}

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.flush();
    if (!f) throw Error(fmt::format("cannot write {}", tmp.string()));
  }
  fs::rename(tmp, path);
}

std::string join_problems(const std::vector<std::string>& p) {
  std::string s;
  for (const auto& x : p) s += "\n  " + x;
  return s;
}

}  // namespace

// -----------------------------------------------------------------------------------------------

std::vector<HfLink> hf_links(HfFamily f, const ModelConfig& m) {
  const std::int64_t C = m.d_model, F = m.d_ff, V = m.vocab_size, D = m.head_dim(), T = m.seq_len;
  std::vector<HfLink> links;
  auto add = [&](std::string hf, std::vector<std::int64_t> shape, std::string nl,
                 std::int64_t row0 = 0, bool transpose = false) {
    links.push_back({std::move(hf), std::move(shape), std::move(nl), row0, transpose});
  };
  if (f == HfFamily::gpt2) {
    add("transformer.wte.weight", {V, C}, "tok_emb.weight");
    add("transformer.wpe.weight", {T, C}, "pos_emb.weight");
    auto ln = [&](const std::string& hf, const std::string& nl) {
      add(hf + ".weight", {C}, nl + ".weight");
      add(hf + ".bias", {C}, nl + ".bias");
    };
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string p = fmt::format("transformer.h.{}.", l), b = fmt::format("blocks.{}.", l);
      // Conv1D stores (in, out): the transpose of a Linear weight.
      ln(p + "ln_1", b + "attn.norm_in");
      add(p + "attn.c_attn.weight", {C, 3 * C}, b + "attn.wqkv.weight", 0, true);
      add(p + "attn.c_attn.bias", {3 * C}, b + "attn.wqkv.bias");
      add(p + "attn.c_proj.weight", {C, C}, b + "attn.wo.weight", 0, true);
      add(p + "attn.c_proj.bias", {C}, b + "attn.wo.bias");
      ln(p + "ln_2", b + "mlp.norm_in");
      add(p + "mlp.c_fc.weight", {C, F}, b + "mlp.w_in.weight", 0, true);
      add(p + "mlp.c_fc.bias", {F}, b + "mlp.w_in.bias");
      add(p + "mlp.c_proj.weight", {F, C}, b + "mlp.w_out.weight", 0, true);
      add(p + "mlp.c_proj.bias", {C}, b + "mlp.w_out.bias");
    }
    ln("transformer.ln_f", "final_norm");
  } else {
    add("model.embed_tokens.weight", {V, C}, "tok_emb.weight");
    // (HF norm name, normlab norm) per family; the plan decides which exist.
    std::vector<std::pair<std::string, std::string>> norms;
    switch (f) {
      case HfFamily::llama:
        norms = {{"input_layernorm", "attn.norm_in"}, {"post_attention_layernorm", "mlp.norm_in"}};
        break;
      case HfFamily::gemma2:
      case HfFamily::gemma3_text:
        norms = {{"input_layernorm", "attn.norm_in"},
                 {"post_attention_layernorm", "attn.norm_out"},
                 {"pre_feedforward_layernorm", "mlp.norm_in"},
                 {"post_feedforward_layernorm", "mlp.norm_out"}};
        break;
      case HfFamily::olmo2:
        norms = {{"post_attention_layernorm", "attn.norm_out"},
                 {"post_feedforward_layernorm", "mlp.norm_out"}};
        break;
      case HfFamily::gpt2: break;
    }
    for (int l = 0; l < m.n_layer; ++l) {
      const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blocks.{}.", l);
      for (const auto& [hf, nl] : norms) add(p + hf + ".weight", {C}, b + nl + ".weight");
      const char* qkv[] = {"q_proj", "k_proj", "v_proj"};
      for (int i = 0; i < 3; ++i) {
        add(p + "self_attn." + qkv[i] + ".weight", {C, C}, b + "attn.wqkv.weight", i * C);
        if (m.bias) add(p + "self_attn." + qkv[i] + ".bias", {C}, b + "attn.wqkv.bias", i * C);
      }
      add(p + "self_attn.o_proj.weight", {C, C}, b + "attn.wo.weight");
      if (m.bias) add(p + "self_attn.o_proj.bias", {C}, b + "attn.wo.bias");
      if (f == HfFamily::gemma3_text || f == HfFamily::olmo2) {
        const std::int64_t w = f == HfFamily::olmo2 ? C : D;
        add(p + "self_attn.q_norm.weight", {w}, b + "attn.q_norm.weight");
        add(p + "self_attn.k_norm.weight", {w}, b + "attn.k_norm.weight");
      }
      add(p + "mlp.gate_proj.weight", {F, C}, b + "mlp.w_in.weight", 0);
      add(p + "mlp.up_proj.weight", {F, C}, b + "mlp.w_in.weight", F);
      add(p + "mlp.down_proj.weight", {C, F}, b + "mlp.w_out.weight");
      if (m.bias) {
        add(p + "mlp.gate_proj.bias", {F}, b + "mlp.w_in.bias", 0);
        add(p + "mlp.up_proj.bias", {F}, b + "mlp.w_in.bias", F);
        add(p + "mlp.down_proj.bias", {C}, b + "mlp.w_out.bias");
      }
    }
    add("model.norm.weight", {C}, "final_norm.weight");
  }
  if (!m.tie_embeddings) add("lm_head.weight", {V, C}, "lm_head.weight");
  return links;
}

HfFamily hf_family_for(const ModelConfig& m) {
  std::vector<std::string> p;
  Placement placement = m.placement;
  if (placement == Placement::mix) {
    // Mix-LN whose post-norm share rounds to zero blocks is pre-norm in every block.
    const ModelPlan plan = build_plan(m);
    auto is_pre = [](const BlockPlan& b) {
      return b.attn.norm_in && !b.attn.norm_after_add && b.mlp.norm_in && !b.mlp.norm_after_add;
    };
    const bool all_pre = std::all_of(plan.blocks.begin(), plan.blocks.end(), is_pre);
    if (all_pre) placement = Placement::pre;
  }
  HfFamily f;
  switch (placement) {
    case Placement::pre:
      f = m.norm == NormKind::layernorm ? HfFamily::gpt2 : HfFamily::llama;
      break;
    case Placement::peri:
      f = m.qk_norm == QKNormKind::none ? HfFamily::gemma2 : HfFamily::gemma3_text;
      break;
    case Placement::reordered: f = HfFamily::olmo2; break;
    default:
      throw ConfigError({fmt::format(
          "model.placement = {}{}: no supported transformers family has it (gpt2, llama: pre; "
          "gemma2, gemma3_text: peri; olmo2: reordered)",
          to_string(m.placement),
          m.placement == Placement::mix ? fmt::format(" (mix_ratio = {})", m.mix_ratio) : "")});
  }
  const std::string fam(to_string(f));
  const double D = m.head_dim(), inv_sqrt_d = 1.0 / std::sqrt(D);
  auto need = [&](bool ok, std::string msg) {
    if (!ok) p.push_back(std::move(msg));
  };
  const bool gemma = f == HfFamily::gemma2 || f == HfFamily::gemma3_text;
  // QK-norm: only gemma3_text (rmsnorm per head before RoPE), olmo2 (rmsnorm full before RoPE).
  if (f == HfFamily::gemma3_text || f == HfFamily::olmo2) {
    const char* scope = f == HfFamily::olmo2 ? "full" : "head";
    need(m.qk_norm == QKNormKind::rmsnorm,
         fmt::format("model.qk_norm = {}: no family has it ({}: rmsnorm, scope {}, pre_rope)",
                     to_string(m.qk_norm), fam, scope));
    need(m.qk_norm == QKNormKind::none ||
             m.qk_norm_scope == (f == HfFamily::olmo2 ? QKNormScope::full : QKNormScope::head),
         fmt::format("model.qk_norm_scope = {}: {} normalises q and k {}",
                     to_string(m.qk_norm_scope), fam,
                     f == HfFamily::olmo2 ? "over the full projection (scope full)"
                                               : "per head (scope head)"));
    need(m.qk_norm == QKNormKind::none || m.qk_norm_position == QKNormPosition::pre_rope,
         fmt::format("model.qk_norm_position = {}: {} normalises q and k before RoPE",
                     to_string(m.qk_norm_position), fam));
  } else {
    need(m.qk_norm == QKNormKind::none,
         fmt::format("model.qk_norm = {}: {} has no QK-norm (gemma3_text: peri + rmsnorm per head "
                     "pre_rope; olmo2: reordered + rmsnorm full pre_rope)",
                     to_string(m.qk_norm), fam));
  }
  if (f == HfFamily::gpt2) {
    need(m.norm_bias, "model.norm_bias = false: GPT-2's LayerNorms have biases");
    need(m.bias, "model.bias = false: GPT-2's linear layers have biases");
    need(m.pos == PosKind::learned, "model.pos = rope: GPT-2 has learned positions (pre-norm "
                                    "layernorm maps to gpt2 only)");
    need(m.mlp == MlpKind::gelu_tanh || m.mlp == MlpKind::gelu,
         fmt::format("model.mlp = {}: GPT-2's MLP is gelu_tanh (gelu_new) or gelu",
                     to_string(m.mlp)));
    need(m.attn_scale == 0 || close(m.attn_scale, inv_sqrt_d) || m.attn_scale == 1.0,
         fmt::format("model.attn_scale = {}: GPT-2 scales scores by 1/sqrt(head_dim) or by 1",
                     m.attn_scale));
  } else {
    need(m.norm == NormKind::rmsnorm,
         fmt::format("model.norm = {}: {} uses RMSNorm", to_string(m.norm), fam));
    need(m.pos == PosKind::rope,
         fmt::format("model.pos = {}: {} uses RoPE", to_string(m.pos), fam));
    need(m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu,
         fmt::format("model.mlp = {}: {} has a gated MLP (swiglu or geglu)", to_string(m.mlp),
                     fam));
    need(!m.bias || f == HfFamily::llama,
         fmt::format("model.bias = true: {} has no MLP biases (llama has biases on every linear)",
                     fam));
  }
  if (gemma) {
    need(m.norm_gain_offset == 1.0,
         fmt::format("model.norm_gain_offset = {}: Gemma's RMSNorm gain is (1 + w)",
                     m.norm_gain_offset));
    need(close(m.embed_scale, std::sqrt(static_cast<double>(m.d_model))),
         fmt::format("model.embed_scale = {}: Gemma scales embeddings by sqrt(d_model) = {}",
                     m.embed_scale, std::sqrt(static_cast<double>(m.d_model))));
    if (m.attn_scale > 0) {
      const double q = std::round(1.0 / (m.attn_scale * m.attn_scale));
      need(q >= 1 && close(std::pow(q, -0.5), m.attn_scale),
           fmt::format("model.attn_scale = {}: Gemma's scale is query_pre_attn_scalar^-1/2 for an "
                       "integer query_pre_attn_scalar", m.attn_scale));
    }
    if (f == HfFamily::gemma3_text)
      need(m.attn_softcap == 0,
           fmt::format("model.attn_softcap = {}: transformers' Gemma 3 applies no attention "
                       "soft-cap (gemma2 does, but has no QK-norm)", m.attn_softcap));
  } else {
    need(m.norm_gain_offset == 0.0,
         fmt::format("model.norm_gain_offset = {}: {}'s norm gain is w (only Gemma uses 1 + w)",
                     m.norm_gain_offset, fam));
    need(m.embed_scale == 1.0,
         fmt::format("model.embed_scale = {}: {} does not scale embeddings", m.embed_scale, fam));
    need(m.attn_softcap == 0,
         fmt::format("model.attn_softcap = {}: {} has no attention soft-cap (gemma2 has)",
                     m.attn_softcap, fam));
    need(m.final_softcap == 0,
         fmt::format("model.final_softcap = {}: {} has no logit soft-cap (gemma2 and "
                     "gemma3_text have)", m.final_softcap, fam));
    if (f != HfFamily::gpt2)
      need(m.attn_scale == 0 || close(m.attn_scale, inv_sqrt_d),
           fmt::format("model.attn_scale = {}: {} scales scores by 1/sqrt(head_dim)", m.attn_scale,
                       fam));
  }
  if (!p.empty()) {
    for (auto& s : p) s += fmt::format(" [export to {}]", fam);
    throw ConfigError(std::move(p));
  }
  return f;
}

std::string hf_config_json(HfFamily f, const ModelConfig& m) {
  json j;
  const int D = m.head_dim();
  j["dtype"] = "float32";
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["vocab_size"] = m.vocab_size;
  j["initializer_range"] = m.init_std;
  if (f == HfFamily::gpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_positions"] = m.seq_len;
    j["n_embd"] = m.d_model;
    j["n_layer"] = m.n_layer;
    j["n_head"] = m.n_head;
    j["n_inner"] = m.d_ff;
    j["activation_function"] = m.mlp == MlpKind::gelu ? "gelu" : "gelu_new";
    j["layer_norm_epsilon"] = m.norm_eps;
    j["scale_attn_weights"] = m.attn_scale != 1.0;
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    return j.dump(2) + "\n";
  }
  static constexpr const char* kArch[] = {"", "LlamaForCausalLM", "Gemma2ForCausalLM",
                                          "Gemma3ForCausalLM", "Olmo2ForCausalLM"};
  j["architectures"] = {kArch[static_cast<int>(f)]};
  j["model_type"] = std::string(to_string(f));
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.d_ff;
  j["num_hidden_layers"] = m.n_layer;
  j["num_attention_heads"] = m.n_head;
  j["num_key_value_heads"] = m.n_head;
  j["head_dim"] = D;
  j[f == HfFamily::gemma2 || f == HfFamily::gemma3_text ? "hidden_activation" : "hidden_act"] =
      m.mlp == MlpKind::swiglu ? "silu" : "gelu_pytorch_tanh";
  j["max_position_embeddings"] = m.seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["attention_bias"] = m.bias;
  j["attention_dropout"] = 0.0;
  const json rope = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  if (f == HfFamily::llama) j["mlp_bias"] = m.bias;
  if (f == HfFamily::gemma3_text)
    j["rope_parameters"] = {{"full_attention", rope}, {"sliding_attention", rope}};
  else
    j["rope_parameters"] = rope;
  if (f == HfFamily::gemma2 || f == HfFamily::gemma3_text) {
    const long q = m.attn_scale > 0 ? std::lround(1.0 / (m.attn_scale * m.attn_scale)) : D;
    j["query_pre_attn_scalar"] = q;
    // Every layer attends to the whole context: no sliding window inside normlab's seq_len.
    j["sliding_window"] = m.seq_len;
    j["layer_types"] = std::vector<std::string>(m.n_layer, "full_attention");
    j["use_bidirectional_attention"] = false;
    j["final_logit_softcapping"] = m.final_softcap > 0 ? json(m.final_softcap) : json(nullptr);
    j["attn_logit_softcapping"] = m.attn_softcap > 0 ? json(m.attn_softcap) : json(nullptr);
  }
  return j.dump(2) + "\n";
}

std::map<std::string, std::vector<float>> hf_tensors(HfFamily f, const ModelConfig& m,
                                                     const ParamTable& table, const float* arena) {
  const auto links = hf_links(f, m);
  check_coverage(links, table);
  std::map<std::string, std::vector<float>> out;
  for (const HfLink& l : links) {
    const LinkGeom g = geom(l);
    std::vector<float> t(g.rows * g.cols);
    gather(l, *table.find(l.nl_name), arena, t.data());
    out.emplace(l.hf_name, std::move(t));
  }
  return out;
}

HfFamily export_hf(const ModelConfig& m, const ParamTable& table, const float* params,
                   const std::string& out_dir) {
  const HfFamily f = hf_family_for(m);
  const auto links = hf_links(f, m);
  const auto tensors = hf_tensors(f, m, table, params);
  std::vector<TensorToWrite> recs;
  for (const HfLink& l : links) {
    const auto& t = tensors.at(l.hf_name);
    recs.push_back({l.hf_name, DType::F32, l.hf_shape,
                    std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(t.data()),
                                                  t.size() * sizeof(float))});
  }
  const fs::path dir(out_dir);
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), recs, {{"format", "pt"}});
  write_text_atomic(dir / "config.json", hf_config_json(f, m));
  return f;
}

HfModel import_hf(const std::string& dir_str, int max_seq_len) {
  const fs::path dir(dir_str);
  const fs::path cfg_path = dir / "config.json";
  const json top = read_json_file(cfg_path);
  std::vector<std::string> problems, notes;
  HfKeys top_keys(top, "", problems);
  const std::string model_type = top_keys.string("model_type", "");

  HfModel out;
  const json* text = &top;
  std::string where;
  if (model_type == "gemma3") {
    // Gemma3ForConditionalGeneration: the language model is text_config; vision is skipped.
    const json* tc = top_keys.raw("text_config");
    if (!tc || !tc->is_object())
      throw FormatError(fmt::format("[hf] {}: model_type = \"gemma3\" without a text_config object",
                                    cfg_path.string()));
    text = tc;
    where = "text_config.";
    notes.push_back("gemma3: the language model (text_config) is imported; vision tower and "
                    "projector weights are skipped");
  }
  HfKeys k(*text, where, problems);
  ModelConfig m;
  if (model_type == "gpt2") {
    out.family = HfFamily::gpt2;
    m = read_gpt2(k, notes);
  } else if (model_type == "llama" || model_type == "gemma2" || model_type == "gemma3_text" ||
             model_type == "gemma3" || model_type == "olmo2") {
    out.family = model_type == "llama"    ? HfFamily::llama
                 : model_type == "gemma2" ? HfFamily::gemma2
                 : model_type == "olmo2"  ? HfFamily::olmo2
                                          : HfFamily::gemma3_text;
    m = read_llama_like(k, out.family, max_seq_len, notes);
    if (model_type == "gemma3") {
      // Gemma3ForConditionalGeneration ties by the top-level key and never soft-caps its logits.
      m.tie_embeddings = top_keys.boolean("tie_word_embeddings", true);
      if (m.final_softcap > 0)
        notes.push_back(fmt::format("{} is not applied by transformers' "
                                    "Gemma3ForConditionalGeneration; normlab final_softcap = 0 "
                                    "computes what HF computes",
                                    k.show("final_logit_softcapping")));
      m.final_softcap = 0.0;
    }
  } else {
    top_keys.refuse("model_type", "not a supported family (gpt2, llama, gemma2, gemma3_text, "
                                  "gemma3, olmo2)");
  }
  if (!problems.empty())
    throw FormatError(fmt::format("[hf] {} cannot be imported exactly:{}", cfg_path.string(),
                                  join_problems(problems)));
  out.config.model = m;
  {
    auto errs = validation_errors(out.config);
    if (!errs.empty())
      throw FormatError(fmt::format("[hf] {} maps to an invalid normlab model:{}",
                                    cfg_path.string(), join_problems(errs)));
  }
  // Parameters.
  const TensorSource src(dir);
  const auto links = hf_links(out.family, m);
  // The file's names may lack the canonical prefix (old GPT-2 checkpoints) or nest the language
  // model (Gemma 3 multimodal): find the prefix that holds the embedding.
  const std::string canon = out.family == HfFamily::gpt2 ? "transformer." : "model.";
  const std::vector<std::string> prefixes =
      out.family == HfFamily::gpt2 ? std::vector<std::string>{"transformer.", ""}
                                   : std::vector<std::string>{"model.", "", "model.language_model.",
                                                              "language_model.model."};
  const std::string emb = out.family == HfFamily::gpt2 ? "wte.weight" : "embed_tokens.weight";
  std::string prefix = canon;
  for (const auto& p : prefixes)
    if (src.has(p + emb)) {
      prefix = p;
      break;
    }
  const std::string head = !src.has("lm_head.weight") && src.has("language_model.lm_head.weight")
                               ? "language_model.lm_head.weight"
                               : "lm_head.weight";
  auto actual = [&](const std::string& name) {
    if (name == "lm_head.weight") return head;
    return prefix + name.substr(canon.size());
  };

  Transformer<float> shape(m, 1, 1, /*allocate=*/false);
  const ParamTable& table = shape.table();
  check_coverage(links, table);
  out.params.assign(table.total(), 0.0f);
  std::set<std::string> used;
  for (const HfLink& l : links) {
    const std::string name = actual(l.hf_name);
    const SafetensorsFile* file = src.file_of(name);
    if (!file) {
      problems.push_back(
          fmt::format("missing tensor '{}' (shape [{}])", name, fmt::join(l.hf_shape, ", ")));
      continue;
    }
    used.insert(name);
    const LinkGeom g = geom(l);
    std::vector<float> buf(g.rows * g.cols);
    try {
      file->read_f32(name, buf, l.hf_shape);
    } catch (const FormatError& e) {
      problems.push_back(e.what());
      continue;
    }
    scatter(l, *table.find(l.nl_name), buf.data(), out.params.data());
  }
  for (const auto& name : src.names()) {
    if (used.count(name)) continue;
    const bool buffer = name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
                        name.ends_with("rotary_emb.inv_freq");
    const bool tied_head = m.tie_embeddings && name == head;  // HF ties it to the embedding
    const bool vision = model_type == "gemma3" && name.rfind(prefix, 0) != 0 && name != head;
    if (!buffer && !tied_head && !vision)
      problems.push_back(fmt::format("unexpected tensor '{}': it has no place in the {} model "
                                     "config.json describes", name, to_string(out.family)));
  }
  if (!problems.empty())
    throw FormatError(fmt::format("[hf] {}: the weights do not match config.json:{}", dir_str,
                                  join_problems(problems)));
  out.notes = std::move(notes);
  return out;
}

}  // namespace normlab
