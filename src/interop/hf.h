// Interchange with Hugging Face transformers: import a causal LM saved by `save_pretrained`
// (config.json + safetensors) into a normlab config and parameter arena, and export a normlab
// model as a directory that `transformers.AutoModelForCausalLM.from_pretrained` loads.
//
// Only exact mappings are made. Each supported family is a region of normlab's option space,
// described by one data record in hf_family_<group>.cpp (docs/interop.md has the table):
//   gpt2        pre,       layernorm + bias, gelu_tanh (gelu_new) or gelu, learned positions
//   llama       pre,       rmsnorm, swiglu (silu) or geglu (gelu_pytorch_tanh), rope (linear or
//                          llama3 scaling), GQA, head_dim, biases on attention and/or the MLP
//   mistral     as llama without biases, + a sliding window on every layer
//   qwen2       as llama with biases on q/k/v only, + sliding layers (layer_types)
//   qwen3       as llama + QK-norm rmsnorm per head before RoPE, + sliding layers (layer_types)
//   gemma2      peri,      rmsnorm with gain (1 + w), geglu, rope, embeddings * sqrt(C),
//                          attn_scale = query_pre_attn_scalar^-1/2, attention and final soft-caps,
//                          sliding layers (layer_types)
//   gemma3_text as gemma2, + QK-norm rmsnorm per head before RoPE, no attention soft-cap, a RoPE
//                          base of its own for sliding layers (rope_local_theta)
//   olmo2       reordered, rmsnorm, swiglu, QK-norm rmsnorm over the full projection before RoPE
// Every llama-like family has grouped-query attention (num_key_value_heads), head_dim and RoPE
// scaling (rope_type default, linear, llama3). An HF config key with no exact normlab counterpart
// (another RoPE scaling, partial rotary factors, ...) is refused with a FormatError naming the key
// and its value; a normlab option with no counterpart in the family it selects is refused on
// export with a ConfigError naming the option. Nothing is ever converted approximately.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"

namespace normlab {

enum class HfFamily { gpt2, llama, mistral, qwen2, qwen3, gemma2, gemma3_text, olmo2 };
std::string_view to_string(HfFamily f);

struct HfModel {
  Config config;              // model section from config.json; the other sections at defaults
  HfFamily family;
  std::vector<float> params;  // normlab's parameter arena (table of config.model), float32
  std::vector<std::string> notes;  // choices the caller may want to show (context capped, ...)
};

// Reads DIR/config.json and DIR/model.safetensors (or the shards named by
// DIR/model.safetensors.index.json). model.seq_len becomes max_position_embeddings, capped at
// `max_seq_len`; learned position tables fix it to their length. Sliding-window layers keep
// their window (model.sliding_window, model.layer_pattern in its canonical form: "global",
// "sliding", "every:K" or a list). Throws FormatError for an unreadable
// or unsupported model, naming every offending config key (or tensor) at once.
HfModel import_hf(const std::string& dir, int max_seq_len = 4096);

// The family a normlab model maps to exactly. Throws ConfigError naming every option that has no
// counterpart in that family (or the placement, when no family has it).
HfFamily hf_family_for(const ModelConfig& m);

// One HF tensor as a block of rows of a normlab parameter: HF tensor `hf_name` (shape `hf_shape`)
// holds rows [row0, row0 + rows) of normlab parameter `nl_name`, stored transposed when
// `transpose` (GPT-2's Conv1D keeps weights as (in, out)).
struct HfLink {
  std::string hf_name;
  std::vector<std::int64_t> hf_shape;
  std::string nl_name;
  std::int64_t row0 = 0;
  bool transpose = false;
};
// Every HF tensor of a family for model `m`, with names as save_pretrained writes them
// ("model.layers.0.self_attn.q_proj.weight", "transformer.h.0.attn.c_attn.weight", ...). The links
// cover every normlab parameter exactly once.
std::vector<HfLink> hf_links(HfFamily f, const ModelConfig& m);

// The HF tensors gathered from a normlab arena (parameters, or gradients: a tied embedding's
// gradient already holds the head's part, as in PyTorch), float32, keyed by HF name.
std::map<std::string, std::vector<float>> hf_tensors(HfFamily f, const ModelConfig& m,
                                                     const ParamTable& table, const float* arena);

// The config.json object of the family for model `m` (float32 weights).
std::string hf_config_json(HfFamily f, const ModelConfig& m);

// Writes OUT_DIR/config.json and OUT_DIR/model.safetensors (float32). Throws ConfigError (see
// hf_family_for) before writing anything when the model does not map exactly. Returns the family.
HfFamily export_hf(const ModelConfig& m, const ParamTable& table, const float* params,
                   const std::string& out_dir);

}  // namespace normlab
