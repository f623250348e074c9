// The records of the Llama line (see hf_family.h): Llama, Mistral, Qwen 2, Qwen 3 and OLMo 2, each
// the llama-like skeleton of hf_family_rules.h refined. The formulas were read from transformers
// 5.x, models/<family>/modeling_<family>.py; docs/interop.md has the table.
#include <vector>

#include "interop/hf_family_rules.h"

namespace normlab::hf::records {

namespace {

// The pre-norm pair of the Llama-like families.
const std::vector<LinkRule> kPreNorms{
    {"input_layernorm.weight", "attn.norm_in.weight", Dim::C},
    {"post_attention_layernorm.weight", "mlp.norm_in.weight", Dim::C}};

}  // namespace

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

}  // namespace normlab::hf::records
