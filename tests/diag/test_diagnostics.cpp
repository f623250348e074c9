// The diagnostics that select parameters from the table (diag/diagnostics.cpp) find them by role
// (ParamSpec::role) and key them by site: DyT's and Derf's alphas under dyt_alpha, nGPT's eigen
// learning rates under ngpt_alpha (never as DyT's), σReparam's sigma and gamma per weight, and
// grad_norms' parameters outside the blocks (the embeddings, the head, the final norm).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "diag/diagnostics.h"
#include "fixtures.h"
#include "normlab/metrics.h"

namespace normlab {
namespace {

// A model of config m after one forward pass with statistics on a fixed batch.
struct Probe {
  explicit Probe(const ModelConfig& m) : model(m, 1, m.seq_len) {
    model.init_params(7);
    std::vector<int> idx(m.seq_len), tgt(m.seq_len);
    for (int t = 0; t < m.seq_len; ++t) idx[t] = t % m.vocab_size, tgt[t] = (t + 1) % m.vocab_size;
    model.set_collect_stats(true);
    model.forward(idx.data(), tgt.data(), 1, m.seq_len, 0.0, false);
  }
  nlohmann::json diagnostics() { return diagnostics_json(model, model.grads(), {}, false); }
  Transformer<float> model;
};

std::set<std::string> keys(const nlohmann::json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

TEST(Diagnostics, DytAlphasAtEveryDytSite) {
  ModelConfig m = test::tiny_model();
  m.norm = NormKind::dyt;
  m.qk_norm = QKNormKind::dyt;
  m.n_layer = 1;
  Probe p(m);
  const nlohmann::json j = p.diagnostics();
  ASSERT_TRUE(j.contains(metric::dyt_alpha));
  const std::set<std::string> sites = {"blocks.0.attn.norm_in", "blocks.0.attn.q_norm",
                                       "blocks.0.attn.k_norm", "blocks.0.mlp.norm_in",
                                       "final_norm"};
  EXPECT_EQ(keys(j[metric::dyt_alpha]), sites);
  EXPECT_EQ(keys(j[metric::dyt_saturated]), sites);
  for (const std::string& s : sites)
    EXPECT_EQ(j[metric::dyt_alpha][s].get<double>(),
              p.model.params()[p.model.table().find(s + ".alpha")->offset])
        << s;
  EXPECT_FALSE(j.contains(metric::ngpt_alpha));
}

// nGPT's eigen learning rates are named `<sublayer>.alpha` like a DyT site's alpha: found by
// role, they are ngpt_alpha (the mean effective alpha per sublayer) and never dyt_alpha.
TEST(Diagnostics, NgptAlphasAreNotDyts) {
  ModelConfig m = test::tiny_model();
  m.placement = Placement::ngpt;
  Probe p(m);
  const nlohmann::json j = p.diagnostics();
  EXPECT_FALSE(j.contains(metric::dyt_alpha));
  EXPECT_FALSE(j.contains(metric::dyt_saturated));
  ASSERT_TRUE(j.contains(metric::ngpt_alpha));
  EXPECT_EQ(keys(j[metric::ngpt_alpha]),
            (std::set<std::string>{"blocks.0.attn", "blocks.0.mlp", "blocks.1.attn",
                                   "blocks.1.mlp"}));
  const ParamSpec& a = *p.model.table().find("blocks.1.mlp.alpha");
  double sum = 0;
  for (long k = 0; k < a.numel; ++k) sum += p.model.params()[a.offset + k];
  const double mult = p.model.plan().blocks[1].mlp.branch_scale_mult;
  EXPECT_DOUBLE_EQ(j[metric::ngpt_alpha]["blocks.1.mlp"].get<double>(), mult * sum / a.numel);
}

TEST(Diagnostics, SigmaPerReparametrizedWeight) {
  ModelConfig m = test::tiny_model();
  m.sigma_reparam = true;
  m.mlp = MlpKind::swiglu;
  m.n_layer = 1;
  Probe p(m);
  const nlohmann::json j = p.diagnostics();
  const std::vector<std::pair<std::string, std::size_t>> want = {
      {"blocks.0.attn.wqkv", 3}, {"blocks.0.attn.wo", 1}, {"blocks.0.mlp.w_in", 2},
      {"blocks.0.mlp.w_out", 1}};
  ASSERT_EQ(keys(j[metric::sigma_w]).size(), want.size());
  for (const auto& [w, blocks] : want) {
    ASSERT_EQ(j[metric::sigma_w][w].size(), blocks) << w;
    ASSERT_EQ(j[metric::sigma_gamma][w].size(), blocks) << w;
    const float* gamma = p.model.params().data() + p.model.table().find(w + ".sigma_gamma")->offset;
    for (std::size_t b = 0; b < blocks; ++b) {
      EXPECT_EQ(j[metric::sigma_gamma][w][b].get<double>(), gamma[b]) << w;
      // at initialisation gamma = sigma(W), so W_hat = W
      EXPECT_NEAR(j[metric::sigma_w][w][b].get<double>(), gamma[b], 1e-4 * gamma[b]) << w;
    }
  }
}

// Outside the blocks: the embeddings, the LM head (with nGPT's logit scale s_z, a scale on the
// head's output) and the final norm. nGPT has no final norm, so its final_norm norm is 0; the
// code that took every parameter outside the blocks that was neither embedding nor head group
// for the final norm's counted s_z there.
TEST(Diagnostics, GradNormsOutsideTheBlocksByRole) {
  for (Placement pl : {Placement::pre, Placement::ngpt}) {
    ModelConfig m = test::tiny_model();
    m.placement = pl;
    m.tie_embeddings = false;
    const ParamLayout lay = build_param_table(m, build_plan(m));
    const std::vector<float> ones(lay.table.total(), 1.0f);
    const GradNorms g = grad_norms(lay.table, m.n_layer, ones);
    const double V = m.vocab_size, C = m.d_model;
    const bool ngpt = pl == Placement::ngpt;
    EXPECT_DOUBLE_EQ(g.embedding, std::sqrt(V * C)) << to_string(pl);
    EXPECT_DOUBLE_EQ(g.head, std::sqrt(V * C + (ngpt ? V : 0.0))) << to_string(pl);
    EXPECT_DOUBLE_EQ(g.final_norm, ngpt ? 0.0 : std::sqrt(C)) << to_string(pl);
  }
}

}  // namespace
}  // namespace normlab
