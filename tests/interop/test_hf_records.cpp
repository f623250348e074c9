// The Hugging Face family records (src/interop/hf_families.cpp) without Python: for every family,
// a normlab model that maps onto it is exported and imported back, giving the same config and the
// same parameters bit for bit (so the link table covers the parameter table, with its transposes
// and q/k/v, gate/up splits, both ways); family selection and refusal messages.
// tests/py/test_hf_interop.py holds the parity against transformers itself.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include "interop/hf.h"
#include "model/param_table.h"
#include "normlab/errors.h"

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

  ModelConfig g2 = base();
  g2.placement = Placement::peri;
  g2.mlp = MlpKind::geglu;
  g2.norm_gain_offset = 1.0;
  g2.embed_scale = std::sqrt(32.0);
  g2.attn_softcap = 2.0;
  g2.final_softcap = 5.0;
  out.push_back({"gemma2", HfFamily::gemma2, g2});

  ModelConfig g3 = g2;
  g3.attn_softcap = 0.0;
  g3.final_softcap = 4.0;
  g3.qk_norm = QKNormKind::rmsnorm;
  g3.qk_norm_scope = QKNormScope::head;
  g3.tie_embeddings = false;
  out.push_back({"gemma3_text", HfFamily::gemma3_text, g3});

  ModelConfig o = base();
  o.placement = Placement::reordered;
  o.qk_norm = QKNormKind::rmsnorm;
  o.qk_norm_scope = QKNormScope::full;
  o.norm_eps = 1e-5;
  out.push_back({"olmo2", HfFamily::olmo2, o});
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
    EXPECT_TRUE(back.config.model == c.m);
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
                               "(gpt2, llama: pre; gemma2, gemma3_text: peri; olmo2: reordered)"),
            std::string::npos)
      << refusal(post);
  ModelConfig qk = base();  // llama with a QK-norm
  qk.qk_norm = QKNormKind::rmsnorm;
  EXPECT_NE(refusal(qk).find("model.qk_norm = rmsnorm: llama has no QK-norm (gemma3_text: peri + "
                             "rmsnorm per head pre_rope; olmo2: reordered + rmsnorm full "
                             "pre_rope) [export to llama]"),
            std::string::npos)
      << refusal(qk);
  ModelConfig olmo = cases().back().m;
  olmo.qk_norm_scope = QKNormScope::head;
  olmo.bias = true;
  const std::string r = refusal(olmo);
  EXPECT_NE(r.find("model.qk_norm_scope = head: olmo2 normalises q and k over the full projection "
                   "(scope full) [export to olmo2]"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("model.bias = true: olmo2 has no MLP biases"), std::string::npos) << r;
}

}  // namespace
}  // namespace normlab
