// The Gemma records (see hf_family.h): Gemma 2 and Gemma 3 (gemma3_text, and its multimodal
// wrapper gemma3), the llama-like skeleton of hf_family_rules.h with peri-norm, Gemma's scalings
// and soft-caps: their export requirements, config.json keys and tensors. The formulas were read
// from transformers 5.x, models/<family>/modeling_<family>.py; docs/interop.md has the table.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "interop/hf_family_rules.h"

namespace normlab::hf::records {

namespace {

// ---------------------------------------------------------------------------------------------
// Export requirements: Gemma's own, with the shared ones of hf_family_rules.h.

// Norm gain, embedding scale and attention scale: Gemma's (1 + w), sqrt(C) and
// query_pre_attn_scalar^-1/2; Gemma 3 applies no attention soft-cap.
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

// ---------------------------------------------------------------------------------------------
// config.json keys beyond the key map: Gemma's, around the llama-like ones (hf_family_config.cpp).

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
// The records.

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

}  // namespace

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

}  // namespace normlab::hf::records
