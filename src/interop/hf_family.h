// One data record per Hugging Face family (internal to src/interop). A record says what the family
// is in normlab's option space (implied on import, required on export), how its config.json keys
// map to normlab's, how its tensors link to normlab's parameters, and which options it refuses.
// hf.cpp interprets the records; adding a family is one record in hf_families.cpp plus its parity
// case in tests/py/test_hf_interop.py.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "interop/hf.h"
#include "interop/hf_keys.h"

namespace normlab::hf {

struct FamilySpec;

// Sizes a tensor shape is written in: C d_model, C3 = 3C, F d_ff, V vocab, T seq_len, D head dim.
enum class Dim { none, C, C3, F, V, T, D };
enum class When { always, bias, untied };  // the link exists always / with model.bias / untied head

// One HF tensor <-> rows of one normlab parameter. Block rules are relative to the layer prefixes
// ("model.layers.{l}." and "blocks.{l}."); the others are full names, HF ones after the family's
// base prefix except "lm_head.weight".
struct LinkRule {
  const char* hf;
  const char* nl;
  Dim rows, cols = Dim::none;   // the HF shape; cols = none for vectors
  int part = 0;                 // row0 = part * rows: q/k/v 0/1/2 of wqkv, gate/up 0/1 of w_in
  bool transpose = false;       // HF stores (in, out) (GPT-2's Conv1D)
  When when = When::always;
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
  bool biases = false;         // every linear and LayerNorm has a bias (GPT-2)
  bool gemma_scaling = false;  // RMSNorm gain (1 + w) and embeddings * sqrt(C)
  QKNormKind qk_norm = QKNormKind::none;  // rmsnorm before RoPE, over qk_scope
  QKNormScope qk_scope = QKNormScope::head;
  std::vector<Requirement> needs;  // on export, in this order
  // --- config.json
  std::vector<IntKey> ints;
  bool head_layout_keys = false;  // num_key_value_heads, head_dim (refused unless MHA, C / H)
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
  // Gemma: soft-cap defaults; whether the attention applies its cap (Gemma 3's never does); the
  // sliding-layer period when config.json has no layer_types (0: sliding_window_pattern, 6); RoPE
  // bases per layer type (Gemma 3).
  std::optional<double> final_cap_default, attn_cap_default;
  bool applies_attn_cap = true;
  long sliding_period = 0;
  bool rope_per_layer_type = false;
  bool mlp_bias_key = false;  // llama: biases on every linear when attention_bias = mlp_bias
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

// Every family, in the order messages list them.
const std::vector<FamilySpec>& families();
const FamilySpec& family_spec(HfFamily f);

}  // namespace normlab::hf
