// The Hugging Face family records (src/interop/hf_family_*.cpp) without Python: for every family,
// a normlab model that maps onto it is exported and imported back, giving the same config and the
// same parameters bit for bit (so the link table covers the parameter table, with its transposes
// and q/k/v, gate/up splits, both ways), in their issue-#18 configurations too (grouped-query
// attention, head_dim != d_model / n_head, sliding layers, scaled RoPE, local RoPE bases,
// per-group biases); family selection and refusal messages.
// tests/py/test_hf_interop.py holds the parity against transformers itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "interop/hf.h"
#include "interop/hf_family.h"
#include "model/param_table.h"
#include "normlab/errors.h"
#include "fixtures.h"

namespace normlab {
namespace {

namespace fs = std::filesystem;

ModelConfig base() {
  ModelConfig m;
  m.vocab_size = 64;
  m.d_model = 32;
  m.n_head = 4;
  m.d_ff = 48;
  m.n_layer = 2;
  m.seq_len = 16;
  m.norm = NormKind::rmsnorm;
  m.pos = PosKind::rope;
  m.mlp = MlpKind::swiglu;
  m.rope_theta = 500.0;
  m.norm_eps = 1e-6;
  return m;
}

struct Case {
  const char* name;
  HfFamily family;
  ModelConfig m;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  ModelConfig g = base();
  g.norm = NormKind::layernorm;
  g.norm_bias = g.bias = true;
  g.pos = PosKind::learned;
  g.rope_theta = ModelConfig{}.rope_theta;  // GPT-2's config.json has no RoPE base
  g.mlp = MlpKind::gelu_tanh;
  g.norm_eps = 1e-5;
  out.push_back({"gpt2", HfFamily::gpt2, g});
  g.mlp = MlpKind::gelu;
  g.tie_embeddings = false;
  g.attn_scale = 1.0;
  out.push_back({"gpt2_untied_erf_unscaled", HfFamily::gpt2, g});

  ModelConfig l = base();
  l.tie_embeddings = false;
  l.bias = true;
  out.push_back({"llama_bias_untied", HfFamily::llama, l});
  // Llama 3: 8 query heads over 2 kv heads, head size 6 != 32 / 8, llama3 RoPE; attention biases.
  ModelConfig l3 = base();
  l3.n_head = 8;
  l3.n_kv_head = 2;
  l3.head_dim = 6;
  l3.rope_scaling = RopeScaling::llama3;
  l3.rope_factor = 8.0;
  l3.rope_low_freq_factor = 1.0;
  l3.rope_high_freq_factor = 4.0;
  l3.rope_original_seq_len = 64;
  l3.attn_qkv_bias = l3.attn_out_bias = true;
  out.push_back({"llama3_gqa_attn_bias", HfFamily::llama, l3});
  ModelConfig ll = base();  // multi-query, linear RoPE, biases in the MLP only
  ll.n_kv_head = 1;
  ll.rope_scaling = RopeScaling::linear;
  ll.rope_factor = 2.5;
  ll.mlp_bias = true;
  out.push_back({"llama_mqa_linear_mlp_bias", HfFamily::llama, ll});

  ModelConfig mi = base();  // Mistral: GQA, a window on every layer
  mi.n_kv_head = 2;
  mi.layer_pattern = "sliding";
  mi.sliding_window = 5;
  mi.tie_embeddings = false;
  out.push_back({"mistral", HfFamily::mistral, mi});

  ModelConfig q2 = base();  // Qwen 2: biases on q/k/v only, GQA, a sliding second layer
  q2.n_kv_head = 2;
  q2.attn_qkv_bias = true;
  q2.layer_pattern = "global,sliding";
  q2.sliding_window = 4;
  out.push_back({"qwen2_sliding_list", HfFamily::qwen2, q2});
  ModelConfig q2g = q2;
  q2g.layer_pattern = "global";
  q2g.sliding_window = 0;
  q2g.rope_scaling = RopeScaling::linear;
  q2g.rope_factor = 4.0;
  out.push_back({"qwen2_global_linear", HfFamily::qwen2, q2g});

  ModelConfig q3 = base();  // Qwen 3: QK-norm per head, MQA, head size 12, attention biases
  q3.qk_norm = QKNormKind::rmsnorm;
  q3.qk_norm_scope = QKNormScope::head;
  q3.n_kv_head = 1;
  q3.head_dim = 12;
  q3.attn_qkv_bias = q3.attn_out_bias = true;
  q3.layer_pattern = "every:2";
  q3.sliding_window = 3;
  q3.tie_embeddings = false;
  out.push_back({"qwen3_mqa_every2", HfFamily::qwen3, q3});

  ModelConfig g2 = base();
  g2.placement = Placement::peri;
  g2.mlp = MlpKind::geglu;
  g2.norm_gain_offset = 1.0;
  g2.embed_scale = std::sqrt(32.0);
  g2.attn_softcap = 2.0;
  g2.final_softcap = 5.0;
  out.push_back({"gemma2", HfFamily::gemma2, g2});
  ModelConfig g2s = g2;  // GQA, head size 12, alternating sliding layers, attention biases
  g2s.n_kv_head = 2;
  g2s.head_dim = 12;
  g2s.layer_pattern = "every:2";
  g2s.sliding_window = 6;
  g2s.attn_scale = 1.0 / std::sqrt(10.0);
  g2s.attn_qkv_bias = g2s.attn_out_bias = true;
  out.push_back({"gemma2_gqa_sliding", HfFamily::gemma2, g2s});

  ModelConfig g3 = g2;
  g3.attn_softcap = 0.0;
  g3.final_softcap = 4.0;
  g3.qk_norm = QKNormKind::rmsnorm;
  g3.qk_norm_scope = QKNormScope::head;
  g3.tie_embeddings = false;
  out.push_back({"gemma3_text", HfFamily::gemma3_text, g3});
  ModelConfig g3l = g3;  // 5:1 sliding/global, MQA, local base 1e4 vs global 1e6 scaled linearly
  g3l.n_layer = 6;
  g3l.n_kv_head = 1;
  g3l.head_dim = 12;
  g3l.layer_pattern = "every:6";
  g3l.sliding_window = 7;
  g3l.rope_theta = 1e6;
  g3l.rope_local_theta = 1e4;
  g3l.rope_scaling = RopeScaling::linear;
  g3l.rope_factor = 8.0;
  out.push_back({"gemma3_text_local_base", HfFamily::gemma3_text, g3l});
  ModelConfig g3s = g3l;  // sliding layers sharing the global (unscaled) RoPE
  g3s.rope_local_theta = 0.0;
  g3s.rope_scaling = RopeScaling::none;
  g3s.rope_factor = 1.0;
  g3s.layer_pattern = "sliding,global,sliding,sliding,global,sliding";
  out.push_back({"gemma3_text_shared_rope", HfFamily::gemma3_text, g3s});

  ModelConfig o = base();
  o.placement = Placement::reordered;
  o.qk_norm = QKNormKind::rmsnorm;
  o.qk_norm_scope = QKNormScope::full;
  o.norm_eps = 1e-5;
  out.push_back({"olmo2", HfFamily::olmo2, o});
  ModelConfig og = o;  // GQA: q_norm over Cq = 48, k_norm over Ckv = 24; attention biases
  og.n_head = 4;
  og.n_kv_head = 2;
  og.head_dim = 12;
  og.attn_qkv_bias = og.attn_out_bias = true;
  out.push_back({"olmo2_gqa_bias", HfFamily::olmo2, og});
  return out;
}

TEST(HfRecords, ExportThenImportIsIdentity) {
  const fs::path root = fs::temp_directory_path() / "normlab_test_hf_records";
  fs::remove_all(root);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(hf_family_for(c.m), c.family);
    const ParamTable table = build_param_table(c.m, build_plan(c.m)).table;
    std::vector<float> params(table.total(), 0.0f);
    for (const ParamSpec& s : table.specs())  // every element distinct, padding left at zero
      for (long i = 0; i < s.numel; ++i)
        params[s.offset + i] = static_cast<float>(std::sin(0.37 * (s.offset + i) + 1.0));
    const fs::path dir = root / c.name;
    ASSERT_EQ(export_hf(c.m, table, params.data(), dir.string()), c.family);
    const HfModel back = import_hf(dir.string());
    EXPECT_EQ(back.family, c.family);
    EXPECT_TRUE(back.config.model == c.m)
        << "n_kv_head " << back.config.model.n_kv_head << " head_dim " << back.config.model.head_dim
        << " pattern " << back.config.model.layer_pattern << " window "
        << back.config.model.sliding_window << " local " << back.config.model.rope_local_theta
        << " bias " << back.config.model.bias << back.config.model.attn_qkv_bias
        << back.config.model.attn_out_bias << back.config.model.mlp_bias;
    ASSERT_EQ(back.params.size(), params.size());
    for (std::size_t i = 0; i < params.size(); ++i)
      ASSERT_EQ(back.params[i], params[i]) << "arena element " << i;
  }
  fs::remove_all(root);
}

TEST(HfRecords, LinksCoverEveryParameterOnce) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const ParamTable table = build_param_table(c.m, build_plan(c.m)).table;
    std::map<std::string, long> covered;
    for (const HfLink& l : hf_links(c.family, c.m)) {
      long n = 1;
      for (auto d : l.hf_shape) n *= d;
      covered[l.nl_name] += n;
    }
    for (const ParamSpec& s : table.specs()) EXPECT_EQ(covered[s.name], s.numel) << s.name;
    EXPECT_EQ(covered.size(), table.specs().size());
  }
}

std::string refusal(const ModelConfig& m) {
  try {
    hf_family_for(m);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(HfRecords, RefusalsNameTheOptionAndTheFamilies) {
  ModelConfig post = base();
  post.placement = Placement::post;
  EXPECT_NE(refusal(post).find("model.placement = post: no supported transformers family has it "
                               "(gpt2, llama, mistral, qwen2, qwen3: pre; gemma2, gemma3_text: "
                               "peri; olmo2: reordered)"),
            std::string::npos)
      << refusal(post);
  ModelConfig qk = base();  // pre-norm with a LayerNorm QK-norm: qwen3's is RMSNorm
  qk.qk_norm = QKNormKind::layernorm;
  EXPECT_NE(refusal(qk).find("model.qk_norm = layernorm: no family has it (qwen3: rmsnorm, scope "
                             "head, pre_rope) [export to qwen3]"),
            std::string::npos)
      << refusal(qk);
  ModelConfig olmo = cases().back().m;
  olmo.qk_norm_scope = QKNormScope::head;
  olmo.mlp_bias = true;
  olmo.layer_pattern = "sliding";
  olmo.sliding_window = 4;
  const std::string r = refusal(olmo);
  EXPECT_NE(r.find("model.qk_norm_scope = head: olmo2 normalises q and k over the full projection "
                   "(scope full) [export to olmo2]"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("(biases on: q/k/v, output projection, MLP): olmo2 has biases on q, k, v and "
                   "the output projection together (attention_bias), none in the MLP"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("model.layer_pattern = \"sliding\" (sliding_window = 4): olmo2 has no "
                   "sliding-window attention (every layer: mistral; per layer: qwen2, qwen3, "
                   "gemma2, gemma3_text)"),
            std::string::npos)
      << r;
  ModelConfig mi = base();  // no biases, no QK-norm, some layers sliding: mistral, which cannot
  mi.layer_pattern = "every:2";
  mi.sliding_window = 4;
  EXPECT_NE(refusal(mi).find("model.layer_pattern = \"every:2\" (sliding_window = 4): mistral "
                             "applies its window to every layer or to none (per layer: qwen2, "
                             "qwen3, gemma2, gemma3_text) [export to mistral]"),
            std::string::npos)
      << refusal(mi);
  ModelConfig g2 = cases()[std::size_t(0)].m;  // gemma2 with a local RoPE base
  for (const Case& c : cases())
    if (std::string(c.name) == "gemma2_gqa_sliding") g2 = c.m;
  g2.rope_local_theta = 100.0;
  EXPECT_NE(refusal(g2).find("model.rope_local_theta = 100: gemma2 has one RoPE for every layer "
                             "(a local base for sliding layers: gemma3_text) [export to gemma2]"),
            std::string::npos)
      << refusal(g2);
  ModelConfig gpt = cases().front().m;  // GPT-2 with GQA and a head size of its own
  gpt.n_kv_head = 2;
  gpt.head_dim = 4;
  const std::string rg = refusal(gpt);
  EXPECT_NE(rg.find("model.n_kv_head = 2: gpt2 has multi-head attention"), std::string::npos) << rg;
  EXPECT_NE(rg.find("model.head_dim = 4: gpt2's head size is d_model / n_head"), std::string::npos)
      << rg;
}

// DyT and Derf (residual norms or QK-norms) are refused by name at every placement, before a
// family is looked for.
TEST(HfRecords, NormFreeLayersAreRefusedByName) {
  for (Placement p : {Placement::pre, Placement::post, Placement::peri}) {
    ModelConfig m = base();
    m.placement = p;
    m.norm = NormKind::dyt;
    m.qk_norm = QKNormKind::derf;
    const std::string r = refusal(m);
    EXPECT_NE(r.find("model.norm = dyt: no supported transformers family has DyT or Derf (their "
                     "norms are LayerNorm or RMSNorm)"),
              std::string::npos)
        << r;
    EXPECT_NE(r.find("model.qk_norm = derf: no supported transformers family has DyT or Derf "
                     "(their QK-norms are RMSNorm)"),
              std::string::npos)
        << r;
    EXPECT_EQ(r.find("model.placement"), std::string::npos) << r;
  }
  ModelConfig m = base();
  m.qk_norm = QKNormKind::dyt;
  EXPECT_NE(refusal(m).find("model.qk_norm = dyt: no supported transformers family"),
            std::string::npos)
      << refusal(m);
}

// A residual branch scale (model.residual_scale) is refused by name, before a family is looked
// for: no transformers family has one.
TEST(HfRecords, ResidualScaleIsRefusedByName) {
  for (ResidualScale r :
       {ResidualScale::rezero, ResidualScale::skipinit, ResidualScale::layerscale}) {
    ModelConfig m = base();
    m.residual_scale = r;
    const std::string msg = refusal(m);
    EXPECT_NE(msg.find(fmt::format("model.residual_scale = {}: no supported transformers family "
                                   "has a learnable scale on the residual branches",
                                   to_string(r))),
              std::string::npos)
        << msg;
  }
}

// An attention gate or sink (model.attn_gate, model.attn_sink) is refused by name.
TEST(HfRecords, AttnGateAndSinkAreRefusedByName) {
  for (AttnGate g : {AttnGate::head, AttnGate::elementwise}) {
    ModelConfig m = base();
    m.attn_gate = g;
    const std::string msg = refusal(m);
    EXPECT_NE(msg.find(fmt::format("model.attn_gate = {}: no supported transformers family",
                                   to_string(g))),
              std::string::npos)
        << msg;
  }
  for (const char* k : {"one", "learned"}) {
    ModelConfig m = base();
    test::set_model_key(m, "model.attn_sink", k);
    const std::string msg = refusal(m);
    EXPECT_NE(msg.find(fmt::format("model.attn_sink = {}: no supported transformers family",
                                   k)),
              std::string::npos)
        << msg;
  }
}

TEST(HfRecords, SigmaReparamIsRefusedByName) {
  ModelConfig m = base();
  m.sigma_reparam = true;
  const std::string msg = refusal(m);
  EXPECT_NE(msg.find("model.sigma_reparam = true: no supported transformers family has σReparam's "
                     "gamma and power-iteration vectors"),
            std::string::npos)
      << msg;
}

// nGPT (model.placement = ngpt) is refused by name: no transformers family is a normalized
// Transformer.
TEST(HfRecords, NgptIsRefusedByName) {
  ModelConfig m = base();
  m.placement = Placement::ngpt;
  m.mlp = MlpKind::swiglu;
  const std::string msg = refusal(m);
  EXPECT_NE(msg.find("model.placement = ngpt: no supported transformers family is a normalized "
                     "Transformer"),
            std::string::npos)
      << msg;
}

// Admin's shortcut scale and HybridNorm are refused by name: no transformers family has either.
TEST(HfRecords, AdminAndHybridAreRefusedByName) {
  ModelConfig m = base();
  m.placement = Placement::post;
  m.init = InitKind::admin;
  EXPECT_NE(refusal(m).find("model.init = admin: no supported transformers family has Admin's "
                            "shortcut scale"),
            std::string::npos)
      << refusal(m);
  m = base();
  m.placement = Placement::hybrid;
  EXPECT_NE(refusal(m).find("model.placement = hybrid: no supported transformers family has it"),
            std::string::npos)
      << refusal(m);
}

TEST(HfRecords, CanonicalLayerPattern) {
  using hf::canonical_layer_pattern;
  EXPECT_EQ(canonical_layer_pattern({false, false}), "global");
  EXPECT_EQ(canonical_layer_pattern({true}), "sliding");
  EXPECT_EQ(canonical_layer_pattern({true, false}), "every:2");
  EXPECT_EQ(canonical_layer_pattern({true, true, true, true, true, false}), "every:6");
  EXPECT_EQ(canonical_layer_pattern({true, false, true, false, true, false}), "every:2");
  EXPECT_EQ(canonical_layer_pattern({false, true}), "global,sliding");
  EXPECT_EQ(canonical_layer_pattern({true, true, false, true}), "every:3");
  EXPECT_EQ(canonical_layer_pattern({true, true, false, true, false}),
            "sliding,sliding,global,sliding,global");
  // Every canonical form is valid and gives back the types.
  for (const std::vector<bool>& t : std::vector<std::vector<bool>>{
           {true, false, true},
           {true, true, false, true, true, false, true},
           {false, true, true}}) {
    ModelConfig m;
    m.n_layer = static_cast<int>(t.size());
    m.layer_pattern = canonical_layer_pattern(t);
    ASSERT_FALSE(layer_pattern_error(m.layer_pattern, m.n_layer)) << m.layer_pattern;
    for (int l = 0; l < m.n_layer; ++l) EXPECT_EQ(m.layer_sliding(l), t[l]) << m.layer_pattern;
  }
}

}  // namespace
}  // namespace normlab
