// The GPT-2 family record (see hf_family.h): its export requirements, its config.json keys beyond
// the key map, and its tensors. The formulas were read from transformers 5.x,
// models/gpt2/modeling_gpt2.py; docs/interop.md has the table.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "interop/hf_family_rules.h"

namespace normlab::hf::records {

namespace {

// ---------------------------------------------------------------------------------------------
// Export requirements.

// GPT-2's own, with the shared ones of hf_family_rules.h.
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

}  // namespace

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

}  // namespace normlab::hf::records
