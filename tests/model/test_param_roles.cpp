// The parameter table's roles and sites (model/params.h: ParamRole, ParamSpec::site): every
// parameter the table declares, under every option that adds one, has the role its declaration
// gives it, a site that its name extends, and ParamTable::find(site, role) finds it. The names
// (the checkpoints') are the test's independent account of what each parameter is.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/param_table.h"

namespace normlab {
namespace {

// What the name says the parameter is (the test's own reading, not the library's).
ParamRole role_from_name(const std::string& n) {
  auto ends = [&](const char* t) { return n.ends_with(t); };
  const bool norm_site = n.find("norm") != std::string::npos;
  if (n == "tok_emb.weight") return ParamRole::tok_emb;
  if (n == "pos_emb.weight") return ParamRole::pos_emb;
  if (n == "lm_head.weight") return ParamRole::lm_head;
  if (ends(".sigma_gamma")) return ParamRole::sigma_gamma;
  if (ends(".sigma_u")) return ParamRole::sigma_u;
  if (ends(".sigma_v")) return ParamRole::sigma_v;
  if (ends(".wqkv.weight")) return ParamRole::attn_qkv;
  if (ends(".wo.weight")) return ParamRole::attn_out;
  if (ends(".wg.weight")) return ParamRole::attn_gate;
  if (ends(".w_in.weight")) return ParamRole::mlp_in;
  if (ends(".w_out.weight")) return ParamRole::mlp_out;
  if (norm_site && ends(".weight")) return ParamRole::norm_gain;
  if (norm_site && ends(".bias")) return ParamRole::norm_bias;
  if (norm_site && ends(".alpha")) return ParamRole::dyt_alpha;
  if (norm_site && ends(".shift")) return ParamRole::norm_shift;
  if (ends(".bias")) return ParamRole::linear_bias;
  if (ends(".sink")) return ParamRole::attn_sink;
  if (ends(".res_scale")) return ParamRole::branch_scale;
  if (ends(".res_omega")) return ParamRole::shortcut_scale;
  if (ends("attn.alpha") || ends("mlp.alpha")) return ParamRole::ngpt_alpha;
  if (ends(".s_qk") || ends(".s_u") || ends(".s_v") || n == "s_z") return ParamRole::ngpt_scale;
  return ParamRole::other;
}

// A parameter's own part (`weight`, `bias`, `alpha`, `shift`, `sigma_*`) follows its site; the
// others are sites of their own.
std::string site_from_name(const std::string& n, ParamRole r) {
  const bool part = r == ParamRole::tok_emb || r == ParamRole::pos_emb ||
                    r == ParamRole::lm_head || is_block_weight(r) || is_sigma_state(r) ||
                    r == ParamRole::linear_bias || r == ParamRole::norm_gain ||
                    r == ParamRole::norm_bias || r == ParamRole::dyt_alpha ||
                    r == ParamRole::norm_shift;
  return part ? n.substr(0, n.rfind('.')) : n;
}

std::vector<std::pair<std::string, ModelConfig>> option_models() {
  std::vector<std::pair<std::string, ModelConfig>> out;
  auto add = [&](const std::string& name, auto set) {
    ModelConfig m = test::tiny_model();
    set(m);
    out.emplace_back(name, m);
  };
  add("pre_bias_learned_untied", [](ModelConfig& m) {
    m.bias = true;
    m.norm_bias = true;
    m.pos = PosKind::learned;
    m.tie_embeddings = false;
  });
  add("dyt_qkdyt", [](ModelConfig& m) {
    m.norm = NormKind::dyt;
    m.qk_norm = QKNormKind::dyt;
  });
  add("derf_bias", [](ModelConfig& m) {
    m.norm = NormKind::derf;
    m.norm_bias = true;
  });
  add("ngpt", [](ModelConfig& m) {
    m.placement = Placement::ngpt;
    m.mlp = MlpKind::swiglu;
    m.tie_embeddings = false;
  });
  add("sigma_gate_sink", [](ModelConfig& m) {
    m.sigma_reparam = true;
    m.attn_gate = AttnGate::head;
    test::set_model_key(m, "model.attn_sink", "learned");
    m.mlp = MlpKind::swiglu;
  });
  add("admin", [](ModelConfig& m) {
    m.placement = Placement::post;
    m.init = InitKind::admin;
  });
  add("layerscale_xavier", [](ModelConfig& m) {
    m.residual_scale = ResidualScale::layerscale;
    m.init = InitKind::xavier;
    m.tie_embeddings = false;
  });
  add("hybrid", [](ModelConfig& m) { m.placement = Placement::hybrid; });
  return out;
}

TEST(ParamRoles, EveryParameterHasItsRoleAndSite) {
  std::set<ParamRole> seen;
  for (const auto& [name, m] : option_models()) {
    const ParamLayout lay = build_param_table(m, build_plan(m));
    for (const ParamSpec& s : lay.table.specs()) {
      const ParamRole want = role_from_name(s.name);
      ASSERT_NE(want, ParamRole::other) << name << ": the test does not know " << s.name;
      EXPECT_EQ(s.role, want) << name << ": " << s.name << " is " << to_string(s.role);
      EXPECT_EQ(s.site, site_from_name(s.name, want)) << name << ": " << s.name;
      EXPECT_EQ(lay.table.find(s.site, s.role), &s) << name << ": " << s.name;
      seen.insert(s.role);
    }
  }
  // The matrix reaches every role the table declares.
  for (int r = static_cast<int>(ParamRole::tok_emb); r <= static_cast<int>(ParamRole::sigma_v);
       ++r)
    EXPECT_TRUE(seen.count(static_cast<ParamRole>(r))) << to_string(static_cast<ParamRole>(r));
}

TEST(ParamRoles, FindBySiteAndRole) {
  ModelConfig m = test::tiny_model();
  m.norm = NormKind::dyt;
  m.sigma_reparam = true;
  const ParamLayout lay = build_param_table(m, build_plan(m));
  const ParamTable& t = lay.table;
  EXPECT_EQ(t.find("blocks.1.mlp.norm_in", ParamRole::dyt_alpha),
            t.find("blocks.1.mlp.norm_in.alpha"));
  EXPECT_EQ(t.find("blocks.0.attn.wqkv", ParamRole::sigma_v), t.find("blocks.0.attn.wqkv.sigma_v"));
  EXPECT_EQ(t.find("blocks.0.attn.wqkv", ParamRole::attn_qkv),
            t.find("blocks.0.attn.wqkv.weight"));
  EXPECT_EQ(t.find("blocks.0.attn.wqkv", ParamRole::attn_out), nullptr);
  EXPECT_EQ(t.find("blocks.0.attn", ParamRole::sigma_v), nullptr);
}

}  // namespace
}  // namespace normlab
