// The compatibility table (src/config/compat.cpp): every row fires on a config built to trigger it
// (and on nothing else there), its message reaches validation and names its way out; valid configs
// of each feature trigger none; Admin's row agrees with the block plan about post-norm blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/compat.h"
#include "model/plan.h"
#include "normlab/config.h"
#include "normlab/config_file.h"

namespace normlab {
namespace {

// The rows of compat::rules() that refuse `c`, by index.
std::vector<std::size_t> rows_refusing(const Config& c) {
  std::vector<std::size_t> out;
  const auto rules = compat::rules();
  for (std::size_t i = 0; i < rules.size(); ++i)
    if (rules[i].refuses(c)) out.push_back(i);
  return out;
}

Config ngpt_config() {
  Config c;
  c.model.placement = Placement::ngpt;
  c.model.mlp = MlpKind::swiglu;
  return c;
}

struct CompatCase {
  std::string_view name;
  std::function<Config()> make;
};

// One config per row; a new row without a case here fails EveryRowFiresAndNamesItsWayOut.
std::vector<CompatCase> compat_triggers() {
  const auto with_ngpt = [](std::function<void(Config&)> set) {
    return [set] {
      Config c = ngpt_config();
      set(c);
      return c;
    };
  };
  return {
      {"deepnorm + residual_scale",
       [] {
         Config c;
         c.model.placement = Placement::deepnorm;
         c.model.residual_scale = ResidualScale::rezero;
         return c;
       }},
      {"l2 outside ngpt",
       [] {
         Config c;
         c.model.norm = NormKind::l2;
         return c;
       }},
      {"ngpt + dyt", with_ngpt([](Config& c) { c.model.norm = NormKind::dyt; })},
      {"ngpt + qk_norm", with_ngpt([](Config& c) { c.model.qk_norm = QKNormKind::rmsnorm; })},
      {"ngpt + layerscale",
       with_ngpt([](Config& c) { c.model.residual_scale = ResidualScale::layerscale; })},
      {"ngpt + mup", with_ngpt([](Config& c) {
         c.model.parametrization = Parametrization::mup;
         c.model.mup_base_width = 64;
       })},
      {"ngpt + sigma_reparam", with_ngpt([](Config& c) { c.model.sigma_reparam = true; })},
      {"ngpt + attn_gate", with_ngpt([](Config& c) { c.model.attn_gate = AttnGate::head; })},
      {"ngpt + attn_sink", with_ngpt([](Config& c) { set_key(c, "model.attn_sink", "one"); })},
      {"ngpt + learned pos", with_ngpt([](Config& c) { c.model.pos = PosKind::learned; })},
      {"ngpt + gelu", with_ngpt([](Config& c) { c.model.mlp = MlpKind::gelu; })},
      {"ngpt + bias", with_ngpt([](Config& c) { c.model.mlp_bias = true; })},
      {"ngpt + norm_bias", with_ngpt([](Config& c) { c.model.norm_bias = true; })},
      {"ngpt + embed_scale", with_ngpt([](Config& c) { c.model.embed_scale = 2.0; })},
      {"ngpt + n_kv_head", with_ngpt([](Config& c) { c.model.n_kv_head = 2; })},
      {"ngpt + qk_clip", with_ngpt([](Config& c) { c.optim.qk_clip = 50; })},
      {"admin + pre",
       [] {
         Config c;
         c.model.init = InitKind::admin;
         return c;
       }},
      {"admin + rezero",
       [] {
         Config c;
         c.model.placement = Placement::post;
         c.model.init = InitKind::admin;
         c.model.residual_scale = ResidualScale::rezero;
         return c;
       }},
      {"hybrid + qk_clip",
       [] {
         Config c;
         c.model.placement = Placement::hybrid;
         c.optim.qk_clip = 50;
         return c;
       }},
  };
}

TEST(Compat, EveryRowFiresAndNamesItsWayOut) {
  const auto rules = compat::rules();
  std::set<std::size_t> covered;
  for (const CompatCase& k : compat_triggers()) {
    const Config c = k.make();
    const auto fired = rows_refusing(c);
    ASSERT_EQ(fired.size(), 1u) << k.name << ": rows " << fmt::format("{}", fmt::join(fired, ", "));
    const compat::Rule& rule = rules[fired[0]];
    covered.insert(fired[0]);
    const std::string message = rule.message(c);
    EXPECT_FALSE(rule.group.empty()) << k.name;
    ASSERT_FALSE(rule.way_out.empty()) << k.name;
    for (const std::string_view key : rule.way_out)
      EXPECT_NE(message.find(key), std::string::npos) << k.name << ": " << key << " in " << message;
    // Validation reports it, as the table says it.
    const auto errors = validation_errors(c);
    EXPECT_NE(std::find(errors.begin(), errors.end(), message), errors.end())
        << k.name << ": " << fmt::format("{}", fmt::join(errors, " | "));
  }
  for (std::size_t i = 0; i < rules.size(); ++i)
    EXPECT_TRUE(covered.count(i)) << "row " << i << " (" << rules[i].group << ") has no trigger";
  EXPECT_EQ(rules.size(), 19u);
}

// Configs of each feature that compose: no row fires and validation passes.
TEST(Compat, ValidConfigsTriggerNone) {
  std::vector<Config> ok(6);
  ok[1] = ngpt_config();
  ok[2].model.placement = Placement::deepnorm;
  ok[3].model.placement = Placement::post;
  ok[3].model.init = InitKind::admin;
  ok[4].model.placement = Placement::hybrid;
  ok[4].model.qk_norm = QKNormKind::rmsnorm;
  ok[4].model.residual_scale = ResidualScale::layerscale;
  ok[5].model.placement = Placement::mix;
  ok[5].model.init = InitKind::admin;
  ok[5].optim.qk_clip = 50;
  for (std::size_t i = 0; i < ok.size(); ++i) {
    EXPECT_TRUE(rows_refusing(ok[i]).empty()) << i;
    EXPECT_TRUE(validation_errors(ok[i]).empty())
        << i << ": " << fmt::format("{}", fmt::join(validation_errors(ok[i]), " | "));
  }
}

// Admin refuses exactly the models whose block plan gives it no shortcut to scale: the row asks
// ModelConfig::post_norm_blocks(), the rule build_plan follows. (A mix_ratio so small that no
// block is post-norm, 1e-12, was admitted before the row asked the plan's rule.)
TEST(Compat, AdminAgreesWithTheBlockPlan) {
  const auto rules = compat::rules();
  const auto admin = std::find_if(rules.begin(), rules.end(), [](const compat::Rule& r) {
    return r.group == "Admin" &&
           std::find(r.way_out.begin(), r.way_out.end(), "model.placement") != r.way_out.end();
  });
  ASSERT_NE(admin, rules.end());
  for (const std::string_view name : enum_names<Placement>()) {
    for (const double ratio : {0.0, 1e-12, 0.25, 0.5, 1.0}) {
      for (const int layers : {1, 3, 4}) {
        Config c;
        c.model.placement = *enum_from_string<Placement>(name);
        c.model.mix_ratio = ratio;
        c.model.n_layer = layers;
        c.model.init = InitKind::admin;
        const ModelPlan plan = build_plan(c.model);
        bool scaled = false;
        for (const BlockPlan& b : plan.blocks)
          scaled = scaled || b.attn.shortcut_scale || b.mlp.shortcut_scale;
        EXPECT_EQ(admin->refuses(c), !scaled) << name << " mix_ratio " << ratio << " L " << layers;
        int post = 0;
        for (const BlockPlan& b : plan.blocks) post += b.attn.shortcut_scale ? 1 : 0;
        EXPECT_EQ(post, c.model.post_norm_blocks()) << name << " " << ratio << " " << layers;
      }
    }
  }
}

}  // namespace
}  // namespace normlab
