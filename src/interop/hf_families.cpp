// The Hugging Face families as data (see hf_family.h). The formulas each family implements were
// read from transformers 5.x, models/<family>/modeling_<family>.py; docs/interop.md has the table.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "interop/hf_family.h"
#include "normlab/errors.h"

namespace normlab::hf {

namespace {

std::string fam(const FamilySpec& f) { return f.model_type; }
double inv_sqrt_d(const ModelConfig& m) {
  return 1.0 / std::sqrt(static_cast<double>(m.head_size()));
}
bool gated(const ModelConfig& m) { return m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu; }
const char* qk_scope_name(const FamilySpec& f) {
  return f.qk_scope == QKNormScope::full ? "full" : "head";
}
bool any_sliding(const ModelConfig& m) {
  for (int l = 0; l < m.n_layer; ++l)
    if (m.layer_sliding(l)) return true;
  return false;
}
bool all_sliding(const ModelConfig& m) {
  for (int l = 0; l < m.n_layer; ++l)
    if (!m.layer_sliding(l)) return false;
  return m.n_layer > 0;
}
// The families whose records satisfy `pred`, comma-separated.
template <class Pred>
std::string families_where(Pred pred) {
  std::string s;
  for (const FamilySpec& o : families())
    if (pred(o)) s += fmt::format("{}{}", s.empty() ? "" : ", ", o.model_type);
  return s;
}
std::string window_families(hf::SlidingKeys kind) {
  return families_where([kind](const FamilySpec& o) { return o.sliding == kind; });
}
std::string show_pattern(const ModelConfig& m) {
  return fmt::format("model.layer_pattern = \"{}\" (sliding_window = {})", m.layer_pattern,
                     m.sliding_window);
}

}  // namespace

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

namespace {

// ---------------------------------------------------------------------------------------------
// Export requirements (what each family refuses), shared by the records that list them.

// QK-norm: a family with one has rmsnorm over its scope before RoPE; the others have none.
const Requirement kQkRms{
    [](const ModelConfig& m, const FamilySpec&) { return m.qk_norm == QKNormKind::rmsnorm; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.qk_norm = {}: no family has it ({}: rmsnorm, scope {}, pre_rope)",
                         to_string(m.qk_norm), fam(f), qk_scope_name(f));
    }};
const Requirement kQkScope{
    [](const ModelConfig& m, const FamilySpec& f) {
      return m.qk_norm == QKNormKind::none || m.qk_norm_scope == f.qk_scope;
    },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.qk_norm_scope = {}: {} normalises q and k {}",
                         to_string(m.qk_norm_scope), fam(f),
                         f.qk_scope == QKNormScope::full ? "over the full projection (scope full)"
                                                         : "per head (scope head)");
    }};
const Requirement kQkPreRope{
    [](const ModelConfig& m, const FamilySpec&) {
      return m.qk_norm == QKNormKind::none || m.qk_norm_position == QKNormPosition::pre_rope;
    },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.qk_norm_position = {}: {} normalises q and k before RoPE",
                         to_string(m.qk_norm_position), fam(f));
    }};
const Requirement kNoQk{
    [](const ModelConfig& m, const FamilySpec&) { return m.qk_norm == QKNormKind::none; },
    [](const ModelConfig& m, const FamilySpec& f) {
      std::string with;  // the families that have a QK-norm
      for (const FamilySpec& o : families())
        if (o.qk_norm != QKNormKind::none)
          with += fmt::format("{}{}: {} + rmsnorm {} pre_rope", with.empty() ? "" : "; ",
                              o.model_type, to_string(o.placement),
                              o.qk_scope == QKNormScope::full ? "full" : "per head");
      return fmt::format("model.qk_norm = {}: {} has no QK-norm ({})", to_string(m.qk_norm),
                         fam(f), with);
    }};

const Requirement kRmsNorm{
    [](const ModelConfig& m, const FamilySpec&) { return m.norm == NormKind::rmsnorm; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.norm = {}: {} uses RMSNorm", to_string(m.norm), fam(f));
    }};
const Requirement kRope{
    [](const ModelConfig& m, const FamilySpec&) { return m.pos == PosKind::rope; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.pos = {}: {} uses RoPE", to_string(m.pos), fam(f));
    }};
const Requirement kGatedMlp{
    [](const ModelConfig& m, const FamilySpec&) { return gated(m); },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.mlp = {}: {} has a gated MLP (swiglu or geglu)", to_string(m.mlp),
                         fam(f));
    }};
// Biases: the groups the family has (q/k/v, output projection, MLP), from its BiasKeys.
bool biases_fit(const ModelConfig& m, hf::BiasKeys b) {
  const bool q = m.has_qkv_bias(), o = m.has_out_bias(), p = m.has_mlp_bias();
  switch (b) {
    case hf::BiasKeys::all: return q && o && p;
    case hf::BiasKeys::none: return !q && !o && !p;
    case hf::BiasKeys::attention: return q == o && !p;
    case hf::BiasKeys::attention_mlp: return q == o;
    case hf::BiasKeys::qkv: return q && !o && !p;
  }
  return false;
}
const char* biases_text(hf::BiasKeys b) {
  switch (b) {
    case hf::BiasKeys::all: return "biases on every linear layer";
    case hf::BiasKeys::none: return "no biases";
    case hf::BiasKeys::attention:
      return "biases on q, k, v and the output projection together (attention_bias), none in the "
             "MLP";
    case hf::BiasKeys::attention_mlp:
      return "biases on q, k, v and the output projection together (attention_bias), and on the "
             "MLP or not (mlp_bias)";
    case hf::BiasKeys::qkv: return "biases on q, k and v only";
  }
  return "";
}
const Requirement kBiases{
    [](const ModelConfig& m, const FamilySpec& f) { return biases_fit(m, f.biases); },
    [](const ModelConfig& m, const FamilySpec& f) {
      std::string on;
      for (auto [name, b] : {std::pair{"q/k/v", m.has_qkv_bias()},
                             std::pair{"output projection", m.has_out_bias()},
                             std::pair{"MLP", m.has_mlp_bias()}})
        if (b) on += fmt::format("{}{}", on.empty() ? "" : ", ", name);
      return fmt::format("model.bias = {}, attn_qkv_bias = {}, attn_out_bias = {}, mlp_bias = {} "
                         "(biases on: {}): {} has {}",
                         m.bias, m.attn_qkv_bias, m.attn_out_bias, m.mlp_bias,
                         on.empty() ? "none" : on, fam(f), biases_text(f.biases));
    }};

// Attention layout, sliding windows and RoPE bases.
const Requirement kMhaKv{
    [](const ModelConfig& m, const FamilySpec&) { return m.kv_heads() == m.n_head; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.n_kv_head = {}: {} has multi-head attention (n_kv_head = n_head)",
                         m.n_kv_head, fam(f));
    }};
const Requirement kHeadDimCOverH{
    [](const ModelConfig& m, const FamilySpec&) { return m.q_width() == m.d_model; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.head_dim = {}: {}'s head size is d_model / n_head", m.head_dim,
                         fam(f));
    }};
const Requirement kNoSliding{
    [](const ModelConfig& m, const FamilySpec&) { return !any_sliding(m); },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format(
          "{}: {} has no sliding-window attention (every layer: {}; per layer: {})",
          show_pattern(m), fam(f),
          window_families(hf::SlidingKeys::every_layer),
          window_families(hf::SlidingKeys::layer_types));
    }};
const Requirement kSlidingEveryLayer{
    [](const ModelConfig& m, const FamilySpec&) { return !any_sliding(m) || all_sliding(m); },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format(
          "{}: {} applies its window to every layer or to none (per layer: {})", show_pattern(m),
          fam(f), window_families(hf::SlidingKeys::layer_types));
    }};
const Requirement kOneRope{
    [](const ModelConfig& m, const FamilySpec&) { return m.rope_local_theta == 0; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.rope_local_theta = {}: {} has one RoPE for every layer (a local "
                         "base for sliding layers: {})",
                         m.rope_local_theta, fam(f),
                         families_where([](const FamilySpec& o) { return o.rope_per_layer_type; }));
    }};

// Norm gain and embedding scale: Gemma's (1 + w) and sqrt(C), or the plain w and 1.
const Requirement kGemmaGain{
    [](const ModelConfig& m, const FamilySpec&) { return m.norm_gain_offset == 1.0; },
    [](const ModelConfig& m, const FamilySpec&) {
      return fmt::format("model.norm_gain_offset = {}: Gemma's RMSNorm gain is (1 + w)",
                         m.norm_gain_offset);
    }};
const Requirement kGemmaEmbedScale{
    [](const ModelConfig& m, const FamilySpec&) {
      return close(m.embed_scale, std::sqrt(static_cast<double>(m.d_model)));
    },
    [](const ModelConfig& m, const FamilySpec&) {
      return fmt::format("model.embed_scale = {}: Gemma scales embeddings by sqrt(d_model) = {}",
                         m.embed_scale, std::sqrt(static_cast<double>(m.d_model)));
    }};
const Requirement kGemmaAttnScale{
    [](const ModelConfig& m, const FamilySpec&) {
      if (!(m.attn_scale > 0)) return true;
      const double q = std::round(1.0 / (m.attn_scale * m.attn_scale));
      return q >= 1 && close(std::pow(q, -0.5), m.attn_scale);
    },
    [](const ModelConfig& m, const FamilySpec&) {
      return fmt::format("model.attn_scale = {}: Gemma's scale is query_pre_attn_scalar^-1/2 for "
                         "an integer query_pre_attn_scalar", m.attn_scale);
    }};
const Requirement kGemma3NoAttnCap{
    [](const ModelConfig& m, const FamilySpec&) { return m.attn_softcap == 0; },
    [](const ModelConfig& m, const FamilySpec&) {
      return fmt::format("model.attn_softcap = {}: transformers' Gemma 3 applies no attention "
                         "soft-cap (gemma2 does, but has no QK-norm)", m.attn_softcap);
    }};
const Requirement kPlainGain{
    [](const ModelConfig& m, const FamilySpec&) { return m.norm_gain_offset == 0.0; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.norm_gain_offset = {}: {}'s norm gain is w (only Gemma uses 1 + w)",
                         m.norm_gain_offset, fam(f));
    }};
const Requirement kNoEmbedScale{
    [](const ModelConfig& m, const FamilySpec&) { return m.embed_scale == 1.0; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.embed_scale = {}: {} does not scale embeddings", m.embed_scale,
                         fam(f));
    }};
const Requirement kNoAttnCap{
    [](const ModelConfig& m, const FamilySpec&) { return m.attn_softcap == 0; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.attn_softcap = {}: {} has no attention soft-cap (gemma2 has)",
                         m.attn_softcap, fam(f));
    }};
const Requirement kNoFinalCap{
    [](const ModelConfig& m, const FamilySpec&) { return m.final_softcap == 0; },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.final_softcap = {}: {} has no logit soft-cap (gemma2 and "
                         "gemma3_text have)", m.final_softcap, fam(f));
    }};
const Requirement kStdAttnScale{
    [](const ModelConfig& m, const FamilySpec&) {
      return m.attn_scale == 0 || close(m.attn_scale, inv_sqrt_d(m));
    },
    [](const ModelConfig& m, const FamilySpec& f) {
      return fmt::format("model.attn_scale = {}: {} scales scores by 1/sqrt(head_dim)",
                         m.attn_scale, fam(f));
    }};

// GPT-2's own.
const std::vector<Requirement> kGpt2Needs{
    kNoQk,
    {[](const ModelConfig& m, const FamilySpec&) { return m.norm_bias; },
     [](const ModelConfig&, const FamilySpec&) -> std::string {
       return "model.norm_bias = false: GPT-2's LayerNorms have biases";
     }},
    kBiases, kMhaKv, kHeadDimCOverH, kNoSliding,
    {[](const ModelConfig& m, const FamilySpec&) { return m.pos == PosKind::learned; },
     [](const ModelConfig&, const FamilySpec&) -> std::string {
       return "model.pos = rope: GPT-2 has learned positions (pre-norm layernorm maps to gpt2 "
              "only)";
     }},
    {[](const ModelConfig& m, const FamilySpec&) {
       return m.mlp == MlpKind::gelu_tanh || m.mlp == MlpKind::gelu;
     },
     [](const ModelConfig& m, const FamilySpec&) {
       return fmt::format("model.mlp = {}: GPT-2's MLP is gelu_tanh (gelu_new) or gelu",
                          to_string(m.mlp));
     }},
    {[](const ModelConfig& m, const FamilySpec&) {
       return m.attn_scale == 0 || close(m.attn_scale, inv_sqrt_d(m)) || m.attn_scale == 1.0;
     },
     [](const ModelConfig& m, const FamilySpec&) {
       return fmt::format("model.attn_scale = {}: GPT-2 scales scores by 1/sqrt(head_dim) or by 1",
                          m.attn_scale);
     }},
    kPlainGain, kNoEmbedScale, kNoAttnCap, kNoFinalCap};

// ---------------------------------------------------------------------------------------------
// config.json keys beyond the key map.

// gpt2 (GPT2LMHeadModel): scale_attn_weights = false means raw q.k scores (attn_scale = 1).
void gpt2_read(HfKeys& k, const FamilySpec&, ModelConfig& m, ReadContext& cx) {
  m.attn_scale = k.boolean("scale_attn_weights", true) ? 0.0 : 1.0;
  if (k.boolean("scale_attn_by_inverse_layer_idx", false))
    k.refuse("scale_attn_by_inverse_layer_idx", "normlab has no per-layer attention scale");
  if (k.boolean("add_cross_attention", false))
    k.refuse("add_cross_attention", "normlab is decoder-only, without cross-attention");
  note_dropout(k, {{"resid_pdrop", 0.1}, {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}}, cx.notes);
}
void gpt2_write(json& j, const FamilySpec&, const ModelConfig& m) {
  j["scale_attn_weights"] = m.attn_scale != 1.0;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
}

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

void llama_read(HfKeys& k, const FamilySpec& f, ModelConfig& m, ReadContext& cx) {
  const long max_pos = llama_common(k, f, m, cx);
  read_sliding(k, f, m);
  read_ropes(k, f, m, max_pos);
  set_seq_len(m, max_pos, cx);
}

// Gemma 2 / 3: attention scale from query_pre_attn_scalar, soft-caps, sliding windows.
void gemma_read(HfKeys& k, const FamilySpec& f, ModelConfig& m, ReadContext& cx) {
  if (k.boolean("use_bidirectional_attention", false))
    k.refuse("use_bidirectional_attention", "normlab's attention is causal");
  const double q = k.number("query_pre_attn_scalar", 256);
  if (!(q > 0))
    k.refuse("query_pre_attn_scalar", "must be > 0");
  else if (q != static_cast<double>(m.head_size()))
    m.attn_scale = std::pow(q, -0.5);  // Gemma2Attention.scaling
  const auto final_cap = k.optional_number("final_logit_softcapping", f.final_cap_default);
  const auto attn_cap = k.optional_number("attn_logit_softcapping", f.attn_cap_default);
  m.final_softcap = final_cap.value_or(0.0);
  if (f.applies_attn_cap)
    m.attn_softcap = attn_cap.value_or(0.0);
  else if (attn_cap)  // Gemma3Attention never passes its soft-cap to the attention function
    cx.notes.push_back(fmt::format("{} is not applied by transformers' Gemma 3 attention; normlab "
                                   "attn_softcap = 0 computes what HF computes",
                                   k.show("attn_logit_softcapping")));
  llama_read(k, f, m, cx);
}

// gemma3 (Gemma3ForConditionalGeneration) ties by its top-level key and never soft-caps logits.
void gemma3_unwrap(HfKeys& top, HfKeys& text, ModelConfig& m, std::vector<std::string>& notes) {
  m.tie_embeddings = top.boolean("tie_word_embeddings", true);
  if (m.final_softcap > 0)
    notes.push_back(fmt::format("{} is not applied by transformers' "
                                "Gemma3ForConditionalGeneration; normlab final_softcap = 0 "
                                "computes what HF computes",
                                text.show("final_logit_softcapping")));
  m.final_softcap = 0.0;
}

std::vector<std::string> layer_types_json(const ModelConfig& m) {
  std::vector<std::string> t;
  for (int l = 0; l < m.n_layer; ++l)
    t.push_back(m.layer_sliding(l) ? "sliding_attention" : "full_attention");
  return t;
}

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
void gemma_write(json& j, const FamilySpec& f, const ModelConfig& m) {
  llama_write(j, f, m);
  const int D = m.head_size();
  const long q = m.attn_scale > 0 ? std::lround(1.0 / (m.attn_scale * m.attn_scale)) : D;
  j["query_pre_attn_scalar"] = q;
  j["use_bidirectional_attention"] = false;
  j["final_logit_softcapping"] = m.final_softcap > 0 ? json(m.final_softcap) : json(nullptr);
  j["attn_logit_softcapping"] = m.attn_softcap > 0 ? json(m.attn_softcap) : json(nullptr);
}

// ---------------------------------------------------------------------------------------------
// Tensor links of the llama-like families: q (Cq, C), k and v (Ckv, C) are rows [0, Cq),
// [Cq, Cq + Ckv), [Cq + Ckv, Cq + 2 Ckv) of wqkv; o (C, Cq) is wo; gate/up (F, C) rows [0, F),
// [F, 2F) of w_in; biases with their group.

std::vector<LinkRule> llama_block(std::vector<LinkRule> norms, std::vector<LinkRule> qk_norms) {
  using W = When;
  std::vector<LinkRule> r = std::move(norms);
  const std::vector<LinkRule> attn{
      {"self_attn.q_proj.weight", "attn.wqkv.weight", Dim::Q, Dim::C, 0},
      {"self_attn.q_proj.bias", "attn.wqkv.bias", Dim::Q, Dim::none, 0, false, W::qkv_bias},
      {"self_attn.k_proj.weight", "attn.wqkv.weight", Dim::KV, Dim::C, 1, false, W::always, Dim::Q},
      {"self_attn.k_proj.bias", "attn.wqkv.bias", Dim::KV, Dim::none, 1, false, W::qkv_bias,
       Dim::Q},
      {"self_attn.v_proj.weight", "attn.wqkv.weight", Dim::KV, Dim::C, 1, false, W::always,
       Dim::QK},
      {"self_attn.v_proj.bias", "attn.wqkv.bias", Dim::KV, Dim::none, 1, false, W::qkv_bias,
       Dim::QK},
      {"self_attn.o_proj.weight", "attn.wo.weight", Dim::C, Dim::Q},
      {"self_attn.o_proj.bias", "attn.wo.bias", Dim::C, Dim::none, 0, false, W::out_bias}};
  const std::vector<LinkRule> mlp{
      {"mlp.gate_proj.weight", "mlp.w_in.weight", Dim::F, Dim::C, 0},
      {"mlp.up_proj.weight", "mlp.w_in.weight", Dim::F, Dim::C, 1},
      {"mlp.down_proj.weight", "mlp.w_out.weight", Dim::C, Dim::F},
      {"mlp.gate_proj.bias", "mlp.w_in.bias", Dim::F, Dim::none, 0, false, W::mlp_bias},
      {"mlp.up_proj.bias", "mlp.w_in.bias", Dim::F, Dim::none, 1, false, W::mlp_bias},
      {"mlp.down_proj.bias", "mlp.w_out.bias", Dim::C, Dim::none, 0, false, W::mlp_bias}};
  r.insert(r.end(), attn.begin(), attn.end());
  r.insert(r.end(), qk_norms.begin(), qk_norms.end());
  r.insert(r.end(), mlp.begin(), mlp.end());
  return r;
}
const std::vector<LinkRule> kLlamaBegin{
    {"model.embed_tokens.weight", "tok_emb.weight", Dim::V, Dim::C}};
const std::vector<LinkRule> kLlamaEnd{
    {"model.norm.weight", "final_norm.weight", Dim::C},
    {"lm_head.weight", "lm_head.weight", Dim::V, Dim::C, 0, false, When::untied}};
const std::vector<Activation> kGatedActs{{MlpKind::swiglu, "silu"},
                                         {MlpKind::geglu, "gelu_pytorch_tanh"}};
const char* kGatedRefusal = "normlab's gated MLPs are swiglu (silu) and geglu (tanh GELU)";

std::vector<IntKey> llama_ints(long vocab, long hidden, long inter, long layers, long heads) {
  return {{&ModelConfig::vocab_size, {"vocab_size"}, vocab},
          {&ModelConfig::d_model, {"hidden_size"}, hidden},
          {&ModelConfig::d_ff, {"intermediate_size"}, inter},
          {&ModelConfig::n_layer, {"num_hidden_layers"}, layers},
          {&ModelConfig::n_head, {"num_attention_heads"}, heads}};
}

// ---------------------------------------------------------------------------------------------
// The records.

FamilySpec gpt2() {
  FamilySpec f;
  f.id = HfFamily::gpt2;
  f.model_type = "gpt2";
  f.architecture = "GPT2LMHeadModel";
  f.placement = Placement::pre;  // with LayerNorm + biases; fused Conv1D c_attn; learned positions
  f.selects = [](const ModelConfig& m) { return m.norm == NormKind::layernorm; };
  f.norm = NormKind::layernorm;
  f.pos = PosKind::learned;
  f.biases = hf::BiasKeys::all;
  f.needs = kGpt2Needs;
  f.ints = {{&ModelConfig::vocab_size, {"vocab_size"}, 50257},
            {&ModelConfig::seq_len, {"n_positions", "max_position_embeddings"}, 1024},
            {&ModelConfig::d_model, {"n_embd", "hidden_size"}, 768},
            {&ModelConfig::n_layer, {"n_layer", "num_hidden_layers"}, 12},
            {&ModelConfig::n_head, {"n_head", "num_attention_heads"}, 12},
            {&ModelConfig::d_ff, {"n_inner"}, 4, /*per_d_model=*/true}};
  f.eps_key = "layer_norm_epsilon";
  f.eps_default = 1e-5;
  f.tie_default = true;
  f.act_key = "activation_function";
  f.act_default = "gelu_new";
  f.acts = {{MlpKind::gelu_tanh, "gelu_new"}, {MlpKind::gelu, "gelu"}};
  f.act_refusal = "normlab's GPT-2 MLP is gelu_new (tanh GELU) or gelu (erf)";
  f.read_rest = gpt2_read;
  f.write_rest = gpt2_write;
  f.prefixes = {"transformer.", ""};
  f.layers = "h.";
  // Conv1D stores (in, out): the transpose of a Linear weight.
  f.begin = {{"transformer.wte.weight", "tok_emb.weight", Dim::V, Dim::C},
             {"transformer.wpe.weight", "pos_emb.weight", Dim::T, Dim::C}};
  f.block = {{"ln_1.weight", "attn.norm_in.weight", Dim::C},
             {"ln_1.bias", "attn.norm_in.bias", Dim::C},
             {"attn.c_attn.weight", "attn.wqkv.weight", Dim::C, Dim::QKV, 0, true},
             {"attn.c_attn.bias", "attn.wqkv.bias", Dim::QKV},
             {"attn.c_proj.weight", "attn.wo.weight", Dim::Q, Dim::C, 0, true},
             {"attn.c_proj.bias", "attn.wo.bias", Dim::C},
             {"ln_2.weight", "mlp.norm_in.weight", Dim::C},
             {"ln_2.bias", "mlp.norm_in.bias", Dim::C},
             {"mlp.c_fc.weight", "mlp.w_in.weight", Dim::C, Dim::F, 0, true},
             {"mlp.c_fc.bias", "mlp.w_in.bias", Dim::F},
             {"mlp.c_proj.weight", "mlp.w_out.weight", Dim::F, Dim::C, 0, true},
             {"mlp.c_proj.bias", "mlp.w_out.bias", Dim::C}};
  f.end = {{"transformer.ln_f.weight", "final_norm.weight", Dim::C},
           {"transformer.ln_f.bias", "final_norm.bias", Dim::C},
           {"lm_head.weight", "lm_head.weight", Dim::V, Dim::C, 0, false, When::untied}};
  return f;
}

// What the llama-like families share: separate q/k/v (GQA, head_dim), gated MLP, RMSNorm, RoPE
// (linear and llama3 scaling).
FamilySpec llama_like(HfFamily id, const char* type, const char* arch, Placement p) {
  FamilySpec f;
  f.id = id;
  f.model_type = type;
  f.architecture = arch;
  f.placement = p;
  f.selects = [](const ModelConfig&) { return true; };
  f.norm = NormKind::rmsnorm;
  f.pos = PosKind::rope;
  f.head_layout_keys = true;
  f.eps_key = "rms_norm_eps";
  f.eps_default = 1e-6;
  f.act_key = "hidden_act";
  f.act_default = "silu";
  f.acts = kGatedActs;
  f.act_refusal = kGatedRefusal;
  f.read_rest = llama_read;
  f.write_rest = llama_write;
  f.prefixes = {"model.", "", "model.language_model.", "language_model.model."};
  f.layers = "layers.";
  f.begin = kLlamaBegin;
  f.end = kLlamaEnd;
  return f;
}

// The pre-norm pair of the Llama-like families.
const std::vector<LinkRule> kPreNorms{
    {"input_layernorm.weight", "attn.norm_in.weight", Dim::C},
    {"post_attention_layernorm.weight", "mlp.norm_in.weight", Dim::C}};

FamilySpec llama() {
  FamilySpec f = llama_like(HfFamily::llama, "llama", "LlamaForCausalLM", Placement::pre);
  // The pre-norm RMSNorm models the others below do not select.
  f.selects = [](const ModelConfig& m) {
    return m.qk_norm == QKNormKind::none && !(any_sliding(m) && !m.has_qkv_bias()) &&
           !(m.has_qkv_bias() && !m.has_out_bias());
  };
  f.needs = {kNoQk,       kRmsNorm,    kRope,         kGatedMlp, kPlainGain, kNoEmbedScale,
             kNoAttnCap,  kNoFinalCap, kStdAttnScale, kBiases,   kNoSliding};
  f.ints = llama_ints(32000, 4096, 11008, 32, 32);
  f.tie_default = false;
  f.max_pos_default = 2048;
  f.biases = hf::BiasKeys::attention_mlp;
  f.block = llama_block(kPreNorms, {});
  return f;
}
// Mistral: Llama without biases, with one sliding window on every layer (null: none).
FamilySpec mistral() {
  FamilySpec f = llama_like(HfFamily::mistral, "mistral", "MistralForCausalLM", Placement::pre);
  f.selects = [](const ModelConfig& m) {
    return m.qk_norm == QKNormKind::none && any_sliding(m) && !m.has_qkv_bias();
  };
  f.needs = {kNoQk,      kRmsNorm,    kRope,         kGatedMlp, kPlainGain,         kNoEmbedScale,
             kNoAttnCap, kNoFinalCap, kStdAttnScale, kBiases,   kSlidingEveryLayer, kOneRope};
  f.ints = llama_ints(32000, 4096, 14336, 32, 32);
  f.kv_heads_default = 8;
  f.tie_default = false;
  f.max_pos_default = 4096 * 32;
  f.sliding = hf::SlidingKeys::every_layer;
  f.window_default = 4096;
  f.block = llama_block(kPreNorms, {});
  return f;
}

// Qwen 2 / 2.5: biases on q, k, v only; sliding layers by layer_types (use_sliding_window).
FamilySpec qwen2() {
  FamilySpec f = llama_like(HfFamily::qwen2, "qwen2", "Qwen2ForCausalLM", Placement::pre);
  f.selects = [](const ModelConfig& m) {
    return m.qk_norm == QKNormKind::none && m.has_qkv_bias() && !m.has_out_bias();
  };
  f.needs = {kNoQk,      kRmsNorm,    kRope,         kGatedMlp, kPlainGain, kNoEmbedScale,
             kNoAttnCap, kNoFinalCap, kStdAttnScale, kBiases,   kOneRope};
  f.ints = llama_ints(151936, 4096, 22016, 32, 32);
  f.tie_default = false;
  f.max_pos_default = 32768;
  f.biases = hf::BiasKeys::qkv;
  f.sliding = hf::SlidingKeys::layer_types;
  f.window_default = 4096;
  f.qwen_window_keys = true;
  f.block = llama_block(kPreNorms, {});
  return f;
}

// Qwen 3: QK-norm (RMSNorm, gain w) per head before RoPE; attention_bias on q, k, v and o.
FamilySpec qwen3() {
  FamilySpec f = llama_like(HfFamily::qwen3, "qwen3", "Qwen3ForCausalLM", Placement::pre);
  f.selects = [](const ModelConfig& m) { return m.qk_norm != QKNormKind::none; };
  f.qk_norm = QKNormKind::rmsnorm;
  f.qk_scope = QKNormScope::head;
  f.needs = {kQkRms,        kQkScope,   kQkPreRope,  kRmsNorm,      kRope,   kGatedMlp, kPlainGain,
             kNoEmbedScale, kNoAttnCap, kNoFinalCap, kStdAttnScale, kBiases, kOneRope};
  f.ints = llama_ints(151936, 4096, 22016, 32, 32);
  f.head_dim_default = 128;
  f.tie_default = false;
  f.max_pos_default = 32768;
  f.biases = hf::BiasKeys::attention;
  f.sliding = hf::SlidingKeys::layer_types;
  f.window_default = 4096;
  f.qwen_window_keys = true;
  f.block = llama_block(kPreNorms, {{"self_attn.q_norm.weight", "attn.q_norm.weight", Dim::D},
                                    {"self_attn.k_norm.weight", "attn.k_norm.weight", Dim::D}});
  return f;
}

// Gemma 2 / 3: peri-norm, RMSNorm gain (1 + w) in float32, embeddings * sqrt(hidden_size),
// attn_scale = query_pre_attn_scalar^-1/2, soft-caps.
FamilySpec gemma(HfFamily id, const char* type, const char* arch, long vocab) {
  FamilySpec f = llama_like(id, type, arch, Placement::peri);
  f.gemma_scaling = true;
  f.ints = llama_ints(vocab, 2304, 9216, 26, 8);
  f.kv_heads_default = 4;
  f.head_dim_default = 256;
  f.tie_default = true;
  f.act_key = "hidden_activation";
  f.act_default = "gelu_pytorch_tanh";
  f.pad_default = 0;
  f.biases = hf::BiasKeys::attention;
  f.sliding = hf::SlidingKeys::layer_types;
  f.window_default = 4096;
  f.read_rest = gemma_read;
  f.write_rest = gemma_write;
  return f;
}
const std::vector<LinkRule> kGemmaNorms{
    {"input_layernorm.weight", "attn.norm_in.weight", Dim::C},
    {"post_attention_layernorm.weight", "attn.norm_out.weight", Dim::C},
    {"pre_feedforward_layernorm.weight", "mlp.norm_in.weight", Dim::C},
    {"post_feedforward_layernorm.weight", "mlp.norm_out.weight", Dim::C}};

FamilySpec gemma2() {
  FamilySpec f = gemma(HfFamily::gemma2, "gemma2", "Gemma2ForCausalLM", 256000);
  f.selects = [](const ModelConfig& m) { return m.qk_norm == QKNormKind::none; };
  f.needs = {kNoQk,      kRmsNorm,         kRope,           kGatedMlp, kBiases,
             kGemmaGain, kGemmaEmbedScale, kGemmaAttnScale, kOneRope};
  f.max_pos_default = 8192;
  f.final_cap_default = 30.0;
  f.attn_cap_default = 50.0;
  f.sliding_period = 2;
  f.block = llama_block(kGemmaNorms, {});
  return f;
}

FamilySpec gemma3_text() {
  FamilySpec f = gemma(HfFamily::gemma3_text, "gemma3_text", "Gemma3ForCausalLM", 262208);
  f.qk_norm = QKNormKind::rmsnorm;  // Gemma3Attention: q_norm / k_norm per head, before RoPE
  f.qk_scope = QKNormScope::head;
  f.needs = {kQkRms,  kQkScope,   kQkPreRope,       kRmsNorm,        kRope,           kGatedMlp,
             kBiases, kGemmaGain, kGemmaEmbedScale, kGemmaAttnScale, kGemma3NoAttnCap};
  f.max_pos_default = 131072;
  f.theta_default = 1000000.0;
  f.applies_attn_cap = false;
  f.rope_per_layer_type = true;
  f.block = llama_block(kGemmaNorms, {{"self_attn.q_norm.weight", "attn.q_norm.weight", Dim::D},
                                      {"self_attn.k_norm.weight", "attn.k_norm.weight", Dim::D}});
  f.wrapper_type = "gemma3";
  f.unwrap = gemma3_unwrap;
  return f;
}

// OLMo 2: norms on the branch outputs (reordered); QK-norm over the whole projection before RoPE.
FamilySpec olmo2() {
  FamilySpec f = llama_like(HfFamily::olmo2, "olmo2", "Olmo2ForCausalLM", Placement::reordered);
  f.qk_norm = QKNormKind::rmsnorm;
  f.qk_scope = QKNormScope::full;
  f.needs = {kQkRms,  kQkScope,   kQkPreRope,    kRmsNorm,   kRope,       kGatedMlp,    kBiases,
             kPlainGain, kNoEmbedScale, kNoAttnCap, kNoFinalCap, kStdAttnScale, kNoSliding};
  f.ints = llama_ints(50304, 4096, 11008, 32, 32);
  f.eps_default = 1e-5;
  f.tie_default = false;
  f.max_pos_default = 2048;
  f.pad_default = 1;
  f.biases = hf::BiasKeys::attention;
  f.block = llama_block({{"post_attention_layernorm.weight", "attn.norm_out.weight", Dim::C},
                         {"post_feedforward_layernorm.weight", "mlp.norm_out.weight", Dim::C}},
                        {{"self_attn.q_norm.weight", "attn.q_norm.weight", Dim::Q},
                         {"self_attn.k_norm.weight", "attn.k_norm.weight", Dim::KV}});
  return f;
}

}  // namespace

const std::vector<FamilySpec>& families() {
  static const std::vector<FamilySpec> all{gpt2(),   llama(),       mistral(), qwen2(),
                                           qwen3(),  gemma2(),      gemma3_text(), olmo2()};
  return all;
}

const FamilySpec& family_spec(HfFamily f) {
  for (const FamilySpec& s : families())
    if (s.id == f) return s;
  NL_CHECK(false, "no record for HF family {}", static_cast<int>(f));
  return families().front();
}

}  // namespace normlab::hf
