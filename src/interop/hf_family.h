// One data record per Hugging Face family (internal to src/interop). A record says what the family
// is in normlab's option space (implied on import, required on export), how its config.json keys
// map to normlab's, how its tensors link to normlab's parameters, and which options it refuses.
// hf.cpp interprets the records; adding a family is one record in its hf_family_<group>.cpp,
// listed in families() (hf_families.cpp), plus its parity case in tests/py/test_hf_interop.py.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "interop/hf.h"
#include "interop/hf_keys.h"

namespace normlab::hf {

struct FamilySpec;

// Sizes a tensor shape is written in: C d_model, Q = Cq = n_head * head_size (queries), KV = Ckv =
// kv_heads * head_size (keys, values), QK = Cq + Ckv, QKV = Cq + 2 Ckv, F d_ff, V vocab,
// T seq_len, D head size.
enum class Dim { none, C, Q, KV, QK, QKV, F, V, T, D };
// The link exists always / with has_qkv_bias() / has_out_bias() / has_mlp_bias() / untied head.
enum class When { always, qkv_bias, out_bias, mlp_bias, untied };

// One HF tensor <-> rows of one normlab parameter. Block rules are relative to the layer prefixes
// ("model.layers.{l}." and "blocks.{l}."); the others are full names, HF ones after the family's
// base prefix except "lm_head.weight".
struct LinkRule {
  const char* hf;
  const char* nl;
  Dim rows, cols = Dim::none;   // the HF shape; cols = none for vectors
  int part = 0;                 // row0 = part * unit: gate/up 0/1 of w_in; k 1 * Q, v 1 * QK
  bool transpose = false;       // HF stores (in, out) (GPT-2's Conv1D)
  When when = When::always;
  Dim unit = Dim::none;         // the row offset's unit; none = rows
};

// An integer config key: the first present of `keys`, else `def` (times d_model when per_d_model).
// Export writes keys[0].
struct IntKey {
  int ModelConfig::*field;
  std::vector<const char*> keys;
  long def;
  bool per_d_model = false;
};

// An MLP the family has: normlab kind and the HF activation name export writes (import accepts
// any name of the same formula).
struct Activation {
  MlpKind mlp;
  const char* hf_name;
};

// An export condition: ok(m), else the refusal `why(m)`.
struct Requirement {
  bool (*ok)(const ModelConfig& m, const FamilySpec& f);
  std::string (*why)(const ModelConfig& m, const FamilySpec& f);
};

// Which biases a family has and how config.json says so.
enum class BiasKeys {
  all,             // every linear and LayerNorm, always (GPT-2)
  none,            // none (Mistral)
  attention,       // attention_bias: q, k, v and o (Gemma, OLMo 2, Qwen 3)
  attention_mlp,   // attention_bias: q, k, v, o; mlp_bias: the MLP (Llama)
  qkv,             // q, k, v always, o and the MLP never (Qwen 2)
};
// Where a family's sliding-window layers come from.
enum class SlidingKeys {
  none,         // no sliding windows (GPT-2, Llama, OLMo 2)
  every_layer,  // sliding_window applies to every layer; null = none (Mistral)
  layer_types,  // layer_types lists sliding_attention / full_attention layers (Gemma, Qwen)
};

struct ReadContext {
  int max_seq_len;
  std::vector<std::string>& notes;
};

struct FamilySpec {
  HfFamily id;
  const char* model_type;    // config.json "model_type" (and the family's name)
  const char* architecture;  // config.json "architectures"
  // --- what the family is in normlab's options
  Placement placement;
  bool (*selects)(const ModelConfig& m);  // the first family of m's placement that selects m wins
  NormKind norm;
  PosKind pos;
  BiasKeys biases = BiasKeys::none;
  SlidingKeys sliding = SlidingKeys::none;
  bool gemma_scaling = false;  // RMSNorm gain (1 + w) and embeddings * sqrt(C)
  QKNormKind qk_norm = QKNormKind::none;  // rmsnorm before RoPE, over qk_scope
  QKNormScope qk_scope = QKNormScope::head;
  std::vector<Requirement> needs;  // on export, in this order
  // --- config.json
  std::vector<IntKey> ints;
  bool head_layout_keys = false;  // num_key_value_heads (GQA) and head_dim
  std::optional<long> kv_heads_default, head_dim_default;
  const char* eps_key;
  double eps_default;
  bool tie_default;
  const char* act_key;
  const char* act_default;
  std::vector<Activation> acts;
  const char* act_refusal;
  // The family's remaining keys, read after the above / written after the above.
  void (*read_rest)(HfKeys& k, const FamilySpec& f, ModelConfig& m, ReadContext& cx);
  void (*write_rest)(json& j, const FamilySpec& f, const ModelConfig& m);
  // Families of the llama kind: defaults read_rest uses.
  long max_pos_default = 0;
  double theta_default = 10000.0;
  std::optional<long> pad_default;
  std::optional<long> window_default;  // sliding_window when config.json has none
  // Qwen: the window exists only with use_sliding_window; without layer_types, layers from
  // max_window_layers on slide.
  bool qwen_window_keys = false;
  // Gemma: soft-cap defaults; whether the attention applies its cap (Gemma 3's never does); the
  // sliding-layer period when config.json has no layer_types (0: sliding_window_pattern, 6); RoPE
  // per layer type (Gemma 3: full_attention and sliding_attention entries).
  std::optional<double> final_cap_default, attn_cap_default;
  bool applies_attn_cap = true;
  long sliding_period = 0;
  bool rope_per_layer_type = false;
  // --- tensors
  std::vector<const char*> prefixes;  // base prefixes tried on import; [0] is canonical
  const char* layers;                 // after the base prefix: "h." / "layers."
  std::vector<LinkRule> begin, block, end;
  // A multimodal wrapper whose text_config is this family (gemma3 for gemma3_text), with the
  // adjustments its top-level keys make.
  const char* wrapper_type = nullptr;
  void (*unwrap)(HfKeys& top, HfKeys& text, ModelConfig& m, std::vector<std::string>& notes) =
      nullptr;
};

// The canonical model.layer_pattern of per-layer types (true = sliding): "global", "sliding",
// "every:K" (smallest K >= 2), else the comma list. Import writes it, so that export -> import
// gives back the same config.
std::string canonical_layer_pattern(const std::vector<bool>& sliding);

// Every family, in the order messages list them.
const std::vector<FamilySpec>& families();
const FamilySpec& family_spec(HfFamily f);

}  // namespace normlab::hf
