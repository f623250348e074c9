// Initialisation, checked statistically for every `init` and every placement: each weight
// tensor's sample mean and standard deviation against the rule of tests/reference/README.md
// ("Initialisation"), with bounds derived from the tensor's size; the 1/sqrt(2L) scaling of the
// residual output projections (gpt2); DeepNorm's beta on exactly the value rows of wqkv, wo, w_in
// and w_out (never the query or key rows); Xavier's uniform bounds; norm gains 1 - gain_offset
// and zero biases exactly. The model is black-box: initialised through init_params and read by
// the parameter table's names. A parameter without a rule here fails the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace normlab {
namespace {

// What the README's rules say one tensor (or row block) should be.
struct Rule {
  enum Kind { normal, uniform, constant } kind;
  double scale;  // std (normal), bound (uniform), value (constant)
};

struct InitCase {
  InitKind init;
  Placement placement;
};

void PrintTo(const InitCase& c, std::ostream* os) {
  *os << "init=" << to_string(c.init) << " placement=" << to_string(c.placement);
}

ModelConfig init_model(const InitCase& c) {
  ModelConfig m;
  m.vocab_size = 256;
  m.n_layer = 4;  // L = 2 would make beta = (8L)^(-1/4) equal to 1/sqrt(2L)
  m.d_model = 64;
  m.n_head = 4;
  m.d_ff = 96;
  m.seq_len = 32;
  m.placement = c.placement;
  m.mix_ratio = 0.5;  // 2 post blocks, 2 pre blocks
  m.norm = NormKind::layernorm;
  m.norm_bias = true;
  m.qk_norm = QKNormKind::layernorm;
  m.pos = PosKind::learned;
  m.mlp = MlpKind::swiglu;  // w_in is (2F, C)
  m.bias = true;
  m.tie_embeddings = false;
  m.init = c.init;
  m.init_std = 0.05;
  // A gain offset on every other placement: gains start at 1 - offset.
  m.norm_gain_offset = static_cast<int>(c.placement) % 2 ? 0.75 : 0.0;
  return m;
}

// The rules, written from the README (not from the parameter table). `rows` selects the q, k or
// v block of wqkv ("q", "k", "v"); empty for every other tensor.
Rule rule_for(const ModelConfig& m, const std::string& name, const std::string& rows) {
  const double L = m.n_layer, C = m.d_model, F = m.d_ff, V = m.vocab_size;
  const double F_in = (m.mlp == MlpKind::swiglu || m.mlp == MlpKind::geglu) ? 2 * F : F;
  const bool deepnorm = m.placement == Placement::deepnorm;
  const double beta = std::pow(8 * L, -0.25);  // DeepNet, decoder-only
  // A linear weight (out, in) before any residual scaling.
  auto linear = [&](double out, double in, double scale) {
    if (m.init == InitKind::xavier) return Rule{Rule::uniform, scale * std::sqrt(6 / (in + out))};
    return Rule{Rule::normal, scale * m.init_std};
  };
  // wo and w_out: DeepNorm's beta, else gpt2's 1/sqrt(2L), else 1.
  const double out_scale = deepnorm ? beta : m.init == InitKind::gpt2 ? 1 / std::sqrt(2 * L) : 1.0;
  auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
  if (name == "tok_emb.weight" || name == "pos_emb.weight") return {Rule::normal, m.init_std};
  if (name == "lm_head.weight") return linear(V, C, 1.0);
  if (ends(".bias")) return {Rule::constant, 0.0};
  if (ends("norm_in.weight") || ends("norm_out.weight") || ends("norm_post.weight") ||
      ends("q_norm.weight") || ends("k_norm.weight") || name == "final_norm.weight")
    return {Rule::constant, 1.0 - m.norm_gain_offset};
  // Xavier sees wqkv as one (3C, C) matrix (as torch.nn.MultiheadAttention's in_proj_weight).
  if (ends("attn.wqkv.weight")) return linear(3 * C, C, rows == "v" && deepnorm ? beta : 1.0);
  if (ends("attn.wo.weight")) return linear(C, C, out_scale);
  if (ends("mlp.w_in.weight")) return linear(F_in, C, deepnorm ? beta : 1.0);
  if (ends("mlp.w_out.weight")) return linear(C, F, out_scale);
  return {Rule::constant, std::numeric_limits<double>::quiet_NaN()};  // unknown: fails
}

// Checks n samples against a rule. For n iid values the sample mean has standard deviation
// sigma / sqrt(n) and the sample std s has sd(s / sigma) ~= sqrt((kurtosis - 1) / (4 n)):
// 1 / sqrt(2 n) for a normal (kurtosis 3), sqrt(0.2 / n) for a uniform (kurtosis 1.8). Bounds of
// kSigmas such deviations fail with probability ~2e-9 per check for a random seed, and the
// seed is fixed: they cannot flake, yet at n = 4096 they resolve a 7% change of scale.
constexpr double kSigmas = 6.0;
void check_samples(const std::string& what, const double* x, long n, const Rule& r) {
  ASSERT_TRUE(std::isfinite(r.scale)) << "no initialisation rule for " << what;
  if (r.kind == Rule::constant) {
    for (long i = 0; i < n; ++i) ASSERT_EQ(x[i], r.scale) << what << "[" << i << "]";
    return;
  }
  double sum = 0, sq = 0, max_abs = 0;
  for (long i = 0; i < n; ++i) {
    sum += x[i];
    max_abs = std::max(max_abs, std::fabs(x[i]));
  }
  const double mean = sum / n;
  for (long i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double sd = std::sqrt(sq / n);
  const double sigma = r.kind == Rule::normal ? r.scale : r.scale / std::sqrt(3.0);
  const double kurtosis = r.kind == Rule::normal ? 3.0 : 1.8;
  EXPECT_LT(std::fabs(mean), kSigmas * sigma / std::sqrt(n)) << what << " mean";
  EXPECT_LT(std::fabs(sd / sigma - 1), kSigmas * std::sqrt((kurtosis - 1) / (4.0 * n)))
      << what << " std " << sd << ", expected " << sigma << " (n = " << n << ")";
  if (r.kind == Rule::uniform) {
    // Xavier's bound holds exactly; the largest of n draws comes within 25 / n of it (the
    // chance it does not is (1 - 25/n)^n < e^-25).
    EXPECT_LE(max_abs, r.scale) << what;
    EXPECT_GT(max_abs, r.scale * (1 - 25.0 / n)) << what;
  }
}

class Init : public ::testing::TestWithParam<InitCase> {};

TEST_P(Init, EveryTensorFollowsItsRule) {
  const ModelConfig m = init_model(GetParam());
  Transformer<double> model(m, 1, m.seq_len);
  model.init_params(1234);
  const long C = m.d_model;
  int checked = 0;
  for (const ParamSpec& s : model.table().specs()) {
    const double* w = model.param(s);
    if (s.name.ends_with("attn.wqkv.weight")) {
      const char* blocks[] = {"q", "k", "v"};
      for (int b = 0; b < 3; ++b)
        check_samples(s.name + "[" + blocks[b] + " rows]", w + b * C * C, C * C,
                      rule_for(m, s.name, blocks[b]));
    } else {
      check_samples(s.name, w, s.numel, rule_for(m, s.name, ""));
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(model.table().specs().size()));
}

std::vector<InitCase> init_cases() {
  std::vector<InitCase> out;
  for (InitKind init : {InitKind::gpt2, InitKind::normal, InitKind::xavier})
    for (Placement p : {Placement::post, Placement::pre, Placement::peri, Placement::reordered,
                        Placement::deepnorm, Placement::mix})
      out.push_back({init, p});
  return out;
}

INSTANTIATE_TEST_SUITE_P(InitsAndPlacements, Init, ::testing::ValuesIn(init_cases()),
                         [](const auto& info) {
                           return std::string(to_string(info.param.init)) + "_" +
                                  std::string(to_string(info.param.placement));
                         });

TEST(Init, SameSeedSameWeightsOtherSeedOthers) {
  const ModelConfig m = init_model({InitKind::gpt2, Placement::deepnorm});
  Transformer<double> a(m, 1, 4), b(m, 1, 4), c(m, 1, 4);
  a.init_params(7);
  b.init_params(7);
  c.init_params(8);
  EXPECT_TRUE(std::equal(a.params().begin(), a.params().end(), b.params().begin()));
  const ParamSpec* wo = a.table().find("blocks.0.attn.wo.weight");
  ASSERT_NE(wo, nullptr);
  EXPECT_NE(a.param(*wo)[0], c.param(*wo)[0]);
}

TEST(Init, BoundsDistinguishTheResidualScalings) {
  // The statistical bounds above must tell the scalings apart at these sizes: 1/sqrt(2L),
  // DeepNorm's beta and 1 differ by more than twice the widest std bound (a normal tensor of
  // n = C * C entries, the smallest one scaled).
  const ModelConfig m = init_model({InitKind::gpt2, Placement::deepnorm});
  const double L = m.n_layer, n = static_cast<double>(m.d_model) * m.d_model;
  const double bound = kSigmas * std::sqrt(2.0 / (4 * n));
  const double gpt2 = 1 / std::sqrt(2 * L), beta = std::pow(8 * L, -0.25);
  EXPECT_GT(std::fabs(beta / gpt2 - 1), 2 * bound);
  EXPECT_GT(1 - beta, 2 * bound);
  EXPECT_GT(1 - gpt2, 2 * bound);
}

// model.init = admin: every tensor but res_omega follows init = normal's rule; the profiling pass
// gives each post-norm sublayer one omega in every channel, 1 for the first; it reads no omega it
// has not set (a second pass over the same batch from other omegas gives the same ones); the
// float model profiles what the double model does.
TEST(Init, AdminProfilesOmega) {
  ModelConfig m = init_model({InitKind::admin, Placement::mix});
  Transformer<double> md(m, 2, m.seq_len);
  Transformer<float> mf(m, 2, m.seq_len);
  md.init_params(99);
  mf.init_params(99);
  ModelConfig as_normal = m;
  as_normal.init = InitKind::normal;
  std::vector<std::vector<double>> omegas;
  for (const ParamSpec& s : md.table().specs()) {
    const double* w = md.param(s);
    if (!s.name.ends_with("res_omega")) {
      if (s.name.ends_with("attn.wqkv.weight")) continue;  // rows checked by the cases above
      check_samples(s.name, w, s.numel, rule_for(as_normal, s.name, ""));
      continue;
    }
    omegas.emplace_back(w, w + s.numel);
    for (long c = 0; c < s.numel; ++c) ASSERT_EQ(w[c], w[0]) << s.name;
    const float* wf = mf.param(*mf.table().find(s.name));
    EXPECT_NEAR(wf[0], w[0], 1e-4 * w[0]) << s.name;
  }
  ASSERT_EQ(omegas.size(), 4u);  // mix_ratio 0.5 of 4 blocks: 2 post blocks
  EXPECT_EQ(omegas[0][0], 1.0);
  for (std::size_t k = 1; k < omegas.size(); ++k) EXPECT_GT(omegas[k][0], 0.0) << k;
  // A second pass over a batch, from other omegas, gives the same omegas twice.
  std::vector<int> idx(2 * m.seq_len);
  for (std::size_t i = 0; i < idx.size(); ++i)
    idx[i] = static_cast<int>((7 * i + 3) % m.vocab_size);
  auto profile = [&](double fill) {
    std::vector<double> out;
    for (const ParamSpec& s : md.table().specs())
      if (s.name.ends_with("res_omega")) std::fill(md.param(s), md.param(s) + s.numel, fill);
    md.admin_profile(idx.data(), 2, m.seq_len);
    for (const ParamSpec& s : md.table().specs())
      if (s.name.ends_with("res_omega")) out.push_back(md.param(s)[0]);
    return out;
  };
  EXPECT_EQ(profile(5.0), profile(0.25));
}

}  // namespace
}  // namespace normlab
