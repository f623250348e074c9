// The model keys on Hugging Face export (interop/hf_export_keys.h).
#include "interop/hf_export_keys.h"

#include <algorithm>
#include <variant>

#include <fmt/format.h>

#include "config/keys.h"

namespace normlab::hf {

const std::vector<ExportKey>& export_keys() {
  using R = ExportRule;
  static const std::vector<ExportKey> table = {
      // The shape, carried by every family's config.json.
      {"model.vocab_size", R::mapped}, {"model.n_layer", R::mapped}, {"model.d_model", R::mapped},
      {"model.n_head", R::mapped}, {"model.n_kv_head", R::mapped}, {"model.head_dim", R::mapped},
      {"model.d_ff", R::mapped}, {"model.d_ff_mult", R::mapped}, {"model.seq_len", R::mapped},
      // Placement (a family per placement; Mix-LN's share decides whether it is Pre-Norm;
      // HybridNorm is no family's placement) and the norm (DyT and Derf refused by value).
      {"model.placement", R::mapped}, {"model.mix_ratio", R::mapped},
      {"model.hybrid_first_pre", R::mapped}, {"model.norm", R::mapped},
      {"model.norm_eps", R::mapped}, {"model.norm_bias", R::mapped},
      {"model.norm_gain_offset", R::mapped},
      // DyT's and Derf's initial alphas, the residual scales' and nGPT's initial values.
      {"model.dyt_alpha_attn", R::init_only}, {"model.dyt_alpha_mlp", R::init_only},
      {"model.dyt_alpha_final", R::init_only}, {"model.dyt_alpha_qk", R::init_only},
      {"model.residual_scale", R::refused,
       "no supported transformers family has a learnable scale on the residual branches"},
      {"model.layerscale_init", R::init_only}, {"model.skipinit_init", R::init_only},
      // gpt-oss has learned sinks and Qwen3-Next an output gate, but normlab maps neither family
      // (their other parts: mixture-of-experts MLPs, YaRN, gated DeltaNet layers).
      {"model.attn_gate", R::refused,
       "no supported transformers family has an attention output gate (Qwen3-Next's is not "
       "mapped)"},
      {"model.attn_sink", R::refused,
       "no supported transformers family has an attention sink (gpt-oss's is not mapped)"},
      {"model.sigma_reparam", R::refused,
       "no supported transformers family has σReparam's gamma and power-iteration vectors "
       "(W_hat = (gamma / sigma(W)) W)"},
      {"model.ngpt_alpha_init", R::init_only},
      // QK-norm, positions and attention, the MLP and biases: the families' requirements.
      {"model.qk_norm", R::mapped}, {"model.qk_norm_scope", R::mapped},
      {"model.qk_norm_position", R::mapped}, {"model.pos", R::mapped},
      {"model.rope_theta", R::mapped}, {"model.rope_scaling", R::mapped},
      {"model.rope_factor", R::mapped}, {"model.rope_low_freq_factor", R::mapped},
      {"model.rope_high_freq_factor", R::mapped}, {"model.rope_original_seq_len", R::mapped},
      {"model.sliding_window", R::mapped}, {"model.layer_pattern", R::mapped},
      {"model.rope_local_theta", R::mapped}, {"model.mlp", R::mapped}, {"model.bias", R::mapped},
      {"model.attn_qkv_bias", R::mapped}, {"model.attn_out_bias", R::mapped},
      {"model.mlp_bias", R::mapped}, {"model.tie_embeddings", R::mapped},
      {"model.attn_softcap", R::mapped}, {"model.final_softcap", R::mapped},
      {"model.attn_scale", R::mapped}, {"model.embed_scale", R::mapped},
      // The initialization (Admin's, which scales the residual, refused by value), and μP
      // (its multipliers checked against the family's fixed scales).
      {"model.init", R::mapped}, {"model.init_std", R::init_only},
      {"model.embed_init_std", R::init_only}, {"model.admin_omega", R::mapped},
      {"model.parametrization", R::mapped}, {"model.mup_base_width", R::mapped},
      {"model.mup_base_d_ff", R::mapped}, {"model.mup_base_head_dim", R::mapped},
      {"model.mup_output_mult", R::mapped},
  };
  return table;
}

std::vector<std::string> unexportable_keys(const ModelConfig& m,
                                           const std::vector<ExportKey>& table) {
  Config c, d;
  c.model = m;
  std::vector<std::string> out;
  for (const keytab::KeySpec& k : keytab::key_table()) {
    if (k.section != "model") continue;
    const keytab::Scalar v = k.get(c);
    if (v == k.get(d)) continue;
    const auto row = std::find_if(table.begin(), table.end(),
                                  [&](const ExportKey& e) { return e.key == k.full; });
    if (row != table.end() && row->rule != ExportRule::refused) continue;
    const auto* text = std::get_if<std::string>(&v);  // an enumeration's name, unquoted
    out.push_back(fmt::format(
        "{} = {}: {}", k.full, text ? *text : keytab::toml_text(v),
        row != table.end() ? row->note
                           : "no supported transformers family maps it (Hugging Face export "
                             "refuses every model option its families do not carry)"));
  }
  return out;
}

}  // namespace normlab::hf
