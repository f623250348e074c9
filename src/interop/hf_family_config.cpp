// config.json keys of the Hugging Face families beyond the key map, as the llama-like families
// share them (see hf_family_rules.h): reading (biases, dropout and padding notes, sliding layers,
// RoPE, context) and writing; plus the canonical layer_pattern that import writes.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "interop/hf_family_rules.h"

namespace normlab::hf {

// The canonical layer_pattern of per-layer types (true = sliding): "global", "sliding", "every:K"
// for the smallest K >= 2 that gives them, else the comma list.
std::string canonical_layer_pattern(const std::vector<bool>& sliding) {
  const long n = static_cast<long>(sliding.size());
  if (std::none_of(sliding.begin(), sliding.end(), [](bool b) { return b; })) return "global";
  if (std::all_of(sliding.begin(), sliding.end(), [](bool b) { return b; })) return "sliding";
  for (long k = 2; k <= n; ++k) {
    bool same = true;
    for (long l = 0; l < n && same; ++l) same = sliding[l] == ((l + 1) % k != 0);
    if (same) return fmt::format("every:{}", k);
  }
  std::string s;
  for (long l = 0; l < n; ++l)
    s += fmt::format("{}{}", l ? "," : "", sliding[l] ? "sliding" : "global");
  return s;
}

namespace records {

// ---------------------------------------------------------------------------------------------
// Reading.

namespace {

// Llama-like families: biases, dropout and padding notes; returns max_position_embeddings.
long llama_common(HfKeys& k, const FamilySpec& f, ModelConfig& m, ReadContext& cx) {
  switch (f.biases) {
    case hf::BiasKeys::all: m.bias = true; break;
    case hf::BiasKeys::none: break;
    case hf::BiasKeys::qkv: m.attn_qkv_bias = true; break;
    case hf::BiasKeys::attention:
      m.attn_qkv_bias = m.attn_out_bias = k.boolean("attention_bias", false);
      break;
    case hf::BiasKeys::attention_mlp: {
      const bool attn = k.boolean("attention_bias", false), mlp = k.boolean("mlp_bias", false);
      if (attn && mlp)  // canonical: the shorthand
        m.bias = true;
      else
        m.attn_qkv_bias = m.attn_out_bias = attn, m.mlp_bias = mlp;
      break;
    }
  }
  note_dropout(k, {{"attention_dropout", 0.0}}, cx.notes);
  if (const auto pad = k.optional_integer("pad_token_id", f.pad_default))
    cx.notes.push_back(fmt::format("{}pad_token_id = {}: HF's embedding (padding_idx) gives that "
                                   "row no gradient from lookups; normlab trains it like any "
                                   "other row; the forward pass is the same",
                                   k.where(), *pad));
  return k.integer("max_position_embeddings", f.max_pos_default);
}
// Context: max_position_embeddings capped at max_seq_len.
void set_seq_len(ModelConfig& m, long max_pos, ReadContext& cx) {
  const long seq = std::min<long>(max_pos, cx.max_seq_len);
  if (seq < max_pos)
    cx.notes.push_back(
        fmt::format("model.seq_len = {} (max_position_embeddings = {} capped)", seq, max_pos));
  m.seq_len = static_cast<int>(seq);
}

// Layer types (true = sliding) and the window: Mistral's sliding_window on every layer, or the
// layer_types list (Gemma: default every sliding_period-th layer global; Qwen: use_sliding_window
// and max_window_layers).
void read_sliding(HfKeys& k, const FamilySpec& f, ModelConfig& m) {
  std::vector<bool> types(std::max(m.n_layer, 0), false);
  std::optional<long> window;
  const bool qwen = f.qwen_window_keys;
  if (f.sliding == hf::SlidingKeys::none) return;
  if (f.sliding == hf::SlidingKeys::every_layer) {
    window = k.optional_integer("sliding_window", f.window_default);
    if (window) types.assign(types.size(), true);
  } else {
    // Qwen: the window exists only with use_sliding_window (Qwen2Config.__post_init__).
    window = qwen && !k.boolean("use_sliding_window", false)
                 ? std::nullopt
                 : k.optional_integer("sliding_window", f.window_default);
    if (const json* lt = k.raw("layer_types"); lt && lt->is_array()) {
      if (static_cast<long>(lt->size()) != m.n_layer) {
        k.refuse("layer_types", fmt::format("expected {} entries", m.n_layer));
        return;
      }
      for (std::size_t l = 0; l < lt->size(); ++l) {
        const json& t = (*lt)[l];
        const std::string name = t.is_string() ? t.get<std::string>() : t.dump();
        if (name != "sliding_attention" && name != "full_attention")
          k.refuse_value("layer_types", json(name).dump(),
                         "unknown layer type (sliding_attention, full_attention)");
        types[l] = name == "sliding_attention";
      }
    } else if (qwen) {
      const long first = k.integer("max_window_layers", 28);
      for (long l = 0; l < m.n_layer; ++l) types[l] = window.has_value() && l >= first;
    } else {
      const long period = f.sliding_period > 0
                              ? f.sliding_period
                              : k.integer("sliding_window_pattern",
                                          k.integer("_sliding_window_pattern", 6));
      if (period < 1) k.refuse("sliding_window_pattern", "must be >= 1");
      for (long l = 0; l < m.n_layer; ++l) types[l] = period >= 1 && (l + 1) % period != 0;
    }
  }
  if (std::none_of(types.begin(), types.end(), [](bool b) { return b; })) return;
  if (!window)
    k.refuse("sliding_window", fmt::format("null, but layer_types has sliding_attention layers "
                                           "(transformers cannot run them){}",
                                           qwen ? " (use_sliding_window = false)" : ""));
  else if (*window < 1)
    k.refuse("sliding_window", "must be >= 1");
  else {
    m.sliding_window = static_cast<int>(*window);
    m.layer_pattern = canonical_layer_pattern(types);
  }
}

// RoPE: one for every layer, or (Gemma 3) one per layer type: the sliding layers' entry gives
// rope_local_theta when it differs from the global one.
void read_ropes(HfKeys& k, const FamilySpec& f, ModelConfig& m, long max_pos) {
  if (!f.rope_per_layer_type) {
    set_rope(m, read_rope(k, nullptr, "rope_theta", f.theta_default, max_pos));
    return;
  }
  const json* rp = k.raw("rope_parameters");
  if (rp && rp->is_object() && !rp->empty() && !rp->contains("full_attention") &&
      !rp->contains("sliding_attention")) {
    k.refuse("rope_parameters", "Gemma 3 expects entries per layer type");
    return;
  }
  const hf::RopeSpec global =
      read_rope(k, "full_attention", "rope_theta", f.theta_default, max_pos);
  set_rope(m, global);
  if (!any_sliding(m)) return;
  const hf::RopeSpec local = read_rope(k, "sliding_attention", "rope_local_base_freq", 10000.0,
                                       max_pos);
  if (local == global) return;  // sliding layers share the global RoPE: rope_local_theta = 0
  if (local.type != RopeScaling::none)
    k.refuse_value("rope_parameters.sliding_attention.rope_type",
                   json(to_string(local.type)).dump(),
                   "scaled differently from the global RoPE: normlab's local RoPE "
                   "(rope_local_theta) is unscaled");
  else
    m.rope_local_theta = local.theta;
}

}  // namespace

void llama_read(HfKeys& k, const FamilySpec& f, ModelConfig& m, ReadContext& cx) {
  const long max_pos = llama_common(k, f, m, cx);
  read_sliding(k, f, m);
  read_ropes(k, f, m, max_pos);
  set_seq_len(m, max_pos, cx);
}

// ---------------------------------------------------------------------------------------------
// Writing.

namespace {

std::vector<std::string> layer_types_json(const ModelConfig& m) {
  std::vector<std::string> t;
  for (int l = 0; l < m.n_layer; ++l)
    t.push_back(m.layer_sliding(l) ? "sliding_attention" : "full_attention");
  return t;
}

}  // namespace

void llama_write(json& j, const FamilySpec& f, const ModelConfig& m) {
  j["max_position_embeddings"] = m.seq_len;
  j["attention_dropout"] = 0.0;
  if (f.biases == hf::BiasKeys::attention || f.biases == hf::BiasKeys::attention_mlp)
    j["attention_bias"] = m.has_qkv_bias();
  if (f.biases == hf::BiasKeys::attention_mlp) j["mlp_bias"] = m.has_mlp_bias();
  const json rope = hf::rope_entry(m);
  if (f.rope_per_layer_type) {
    json local = rope;
    if (m.rope_local_theta > 0)
      local = {{"rope_type", "default"}, {"rope_theta", m.rope_local_theta}};
    j["rope_parameters"] = {{"full_attention", rope}, {"sliding_attention", local}};
  } else {
    j["rope_parameters"] = rope;
  }
  const bool sliding = any_sliding(m);
  switch (f.sliding) {
    case hf::SlidingKeys::none: break;
    case hf::SlidingKeys::every_layer:
      j["sliding_window"] = sliding ? json(m.sliding_window) : json(nullptr);
      break;
    case hf::SlidingKeys::layer_types:
      // Without sliding layers the window is never used; Gemma's config wants a number.
      j["sliding_window"] = sliding ? m.sliding_window : m.seq_len;
      j["layer_types"] = layer_types_json(m);
      if (f.qwen_window_keys) {
        j["use_sliding_window"] = sliding;
        j["max_window_layers"] = m.n_layer;  // unused: layer_types is given
        if (!sliding) j["sliding_window"] = nullptr;
      }
      break;
  }
}

}  // namespace records

}  // namespace normlab::hf
