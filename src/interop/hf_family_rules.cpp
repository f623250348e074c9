// What several Hugging Face family records share (see hf_family_rules.h): the export requirements
// they list and the llama-like skeleton (tensor links, integer keys, base record).
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "interop/hf_family_rules.h"

namespace normlab::hf::records {

namespace {

std::string fam(const FamilySpec& f) { return f.model_type; }
bool gated(const ModelConfig& m) { return m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu; }
const char* qk_scope_name(const FamilySpec& f) {
  return f.qk_scope == QKNormScope::full ? "full" : "head";
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
namespace {

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

}  // namespace

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
// Norm gain and embedding scale: the plain w and 1 (Gemma's (1 + w) and sqrt(C):
// hf_family_gemma.cpp).
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

namespace {

const std::vector<LinkRule> kLlamaBegin{
    {"model.embed_tokens.weight", "tok_emb.weight", Dim::V, Dim::C}};
const std::vector<LinkRule> kLlamaEnd{
    {"model.norm.weight", "final_norm.weight", Dim::C},
    {"lm_head.weight", "lm_head.weight", Dim::V, Dim::C, 0, false, When::untied}};
const std::vector<Activation> kGatedActs{{MlpKind::swiglu, "silu"},
                                         {MlpKind::geglu, "gelu_pytorch_tanh"}};
const char* kGatedRefusal = "normlab's gated MLPs are swiglu (silu) and geglu (tanh GELU)";

}  // namespace

std::vector<IntKey> llama_ints(long vocab, long hidden, long inter, long layers, long heads) {
  return {{&ModelConfig::vocab_size, {"vocab_size"}, vocab},
          {&ModelConfig::d_model, {"hidden_size"}, hidden},
          {&ModelConfig::d_ff, {"intermediate_size"}, inter},
          {&ModelConfig::n_layer, {"num_hidden_layers"}, layers},
          {&ModelConfig::n_head, {"num_attention_heads"}, heads}};
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

}  // namespace normlab::hf::records
