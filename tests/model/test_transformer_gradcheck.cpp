// Whole-model gradient check in double precision over a generated option matrix: every option
// value appears with every placement. Each parameter tensor is checked by central differences of
// the full loss (cross-entropy + z-loss): every entry of a small tensor, a fixed fraction of a
// larger one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <fmt/ranges.h>

#include "fixtures.h"
#include "gradcheck.h"
#include "model/plan.h"
#include "model/transformer.h"

namespace normlab::test {
namespace {

struct QkOpt {
  QKNormKind kind;
  QKNormScope scope;
  QKNormPosition pos;
  const char* name;
};
const QkOpt kQk[] = {
    {QKNormKind::none, QKNormScope::head, QKNormPosition::pre_rope, "qknone"},
    {QKNormKind::rmsnorm, QKNormScope::head, QKNormPosition::pre_rope, "qkrms_head"},
    {QKNormKind::layernorm, QKNormScope::full, QKNormPosition::pre_rope, "qkln_full"},
    {QKNormKind::rmsnorm, QKNormScope::full, QKNormPosition::post_rope, "qkrms_full_post"},
    {QKNormKind::layernorm, QKNormScope::head, QKNormPosition::post_rope, "qkln_head_post"},
    {QKNormKind::dyt, QKNormScope::head, QKNormPosition::pre_rope, "qkdyt_head"},
    {QKNormKind::derf, QKNormScope::full, QKNormPosition::post_rope, "qkderf_full_post"},
};
// The residual norm kinds, each without and (where it has one) with its bias.
struct NormOpt {
  NormKind kind;
  bool bias;
};
const NormOpt kNorms[] = {{NormKind::layernorm, false}, {NormKind::layernorm, true},
                          {NormKind::rmsnorm, false},   {NormKind::dyt, false},
                          {NormKind::dyt, true},        {NormKind::derf, false},
                          {NormKind::derf, true}};
const Placement kPlacements[] = {Placement::post,     Placement::pre,
                                 Placement::peri,     Placement::reordered,
                                 Placement::deepnorm, Placement::mix,
                                 Placement::ngpt,     Placement::hybrid};

// nGPT refuses what does not compose with it (src/config/compat.cpp, the nGPT rows): its cases
// keep the rest of the matrix (caps, z-loss, ties, head counts and explicit head sizes, attention
// scale, windows, local RoPE, RoPE scaling) and take turns at the initial eigen learning rate.
void restrict_to_ngpt(ModelConfig& m, int i) {
  m.norm = NormKind::layernorm;
  m.norm_bias = false;
  m.qk_norm = QKNormKind::none;
  m.residual_scale = ResidualScale::none;
  m.attn_gate = AttnGate::none;
  test::set_model_key(m, "model.attn_sink", "none");
  m.parametrization = Parametrization::standard;
  m.pos = PosKind::rope;
  m.mlp = MlpKind::swiglu;
  m.bias = m.attn_qkv_bias = m.attn_out_bias = m.mlp_bias = false;
  m.embed_scale = 1.0;
  m.norm_gain_offset = 0.0;
  m.n_kv_head = 0;
  m.sigma_reparam = false;
  m.ngpt_alpha_init = i % 2 == 0 ? 0.05 : 0.6;
}
// (n_head, d_model): odd head counts too; 3 heads need a width divisible by 3 (D = 4).
struct HeadOpt {
  int n_head, d_model;
};
const HeadOpt kHeads[] = {{2, 16}, {4, 16}, {1, 16}, {3, 12}};
// Mix-LN with L = 3: ceil(ratio * 3) = 2 post blocks, 0 (all pre), 3 (all post, no final norm).
const double kMixRatios[] = {0.5, 0.0, 1.0};

struct Case {
  ModelConfig m;
  double z;
  std::string name;
};

// Case i of a placement cycles every option list with its own stride, so that over
// kPerPlacement cases each value of each option appears (lists have at most 7 values; the
// attention layout, GQA/MQA and an explicit head size, is on for the second half, which meets
// every head count);
// EveryOptionValueAppearsWithEveryPlacement holds the design to that.
constexpr int kPerPlacement = 8;
constexpr double kFloor = 1e-4;
std::vector<Case> make_cases() {
  std::vector<Case> out;
  for (Placement pl : kPlacements)
    for (int i = 0; i < kPerPlacement; ++i) {
      Case c;
      c.m = tiny_model();
      ModelConfig& m = c.m;
      const int pi = static_cast<int>(pl);
      m.n_layer = pl == Placement::mix ? 3 : 2;
      const HeadOpt& h = kHeads[(i + 2 * pi) % 4];
      m.d_model = h.d_model;
      m.n_head = h.n_head;
      m.placement = pl;
      m.mix_ratio = kMixRatios[(i / 2) % 3];
      const NormOpt& nk = kNorms[i % std::size(kNorms)];
      m.norm = nk.kind;
      m.norm_bias = nk.bias;
      // DyT / Derf alphas start at 1 (before the perturbation below). With the defaults (0.2 in
      // the MLP) the signal shrinks through the sites, early layers' gradients fall below kFloor
      // and are checked absolutely at the differences' own rounding noise: measured up to 8.4e-7
      // against kTol = 1e-6, 3.1e-7 at 1. (The sites' own starting values: test_norm_ops.cpp.)
      m.dyt_alpha_attn = m.dyt_alpha_mlp = m.dyt_alpha_final = m.dyt_alpha_qk = 1.0;
      const QkOpt& q = kQk[(i + 4) % std::size(kQk)];
      m.qk_norm = q.kind;
      m.qk_norm_scope = q.scope;
      m.qk_norm_position = q.pos;
      const bool caps = i % 2 == 1;
      m.attn_softcap = caps ? 1.5 : 0;
      m.final_softcap = caps ? 1.5 : 0;
      c.z = (i / 2) % 2 ? 1e-2 : 0.0;
      m.pos = (i % 4 < 2) ? PosKind::rope : PosKind::learned;
      const MlpKind mlps[] = {MlpKind::gelu, MlpKind::gelu_tanh, MlpKind::swiglu, MlpKind::geglu};
      m.mlp = mlps[(i + pi) % 4];
      m.tie_embeddings = (i % 2) == 0;
      m.norm_gain_offset = i == 5 ? 1.0 : 0.0;
      m.embed_scale = i == 4 ? 4.0 : 1.0;
      m.attn_scale = i == 3 ? 0.3 : 0.0;
      if (i >= kPerPlacement / 2) {  // grouped-query / multi-query attention, explicit head size
        if (m.n_head == 4) m.n_kv_head = 2, m.head_dim = 6;
        if (m.n_head == 3) m.n_kv_head = 1, m.head_dim = 6;
        if (m.n_head == 2) m.n_kv_head = 1;
        if (m.n_head == 1) m.head_dim = 6;
      }
      // μP against a base model of half the width and half the head size (every multiplier != 1:
      // readout, attention scale, the init of the hidden matrices), once with an output multiplier.
      if (i % 4 == 2) {
        m.parametrization = Parametrization::mup;
        m.mup_base_width = m.d_model / 2;
        m.mup_base_head_dim = m.head_size() / 2;
        m.mup_output_mult = i == 6 ? 1.5 : 1.0;
      }
      // The residual branch scale, every value but with DeepNorm (which refuses it); its
      // parameters start away from 0 (SkipInit's and LayerScale's init keys; ReZero's 0 is moved
      // by the perturbation below) so that the branches' gradients are not all zero.
      const ResidualScale scales[] = {ResidualScale::none, ResidualScale::rezero,
                                      ResidualScale::skipinit, ResidualScale::layerscale};
      m.residual_scale = pl == Placement::deepnorm ? ResidualScale::none : scales[(i / 2 + pi) % 4];
      m.skipinit_init = 0.5;
      m.layerscale_init = 0.7;
      // Gated attention and attention sinks, every value with every placement (a learned sink
      // starts at 0 and is moved by the perturbation below).
      const AttnGate gates[] = {AttnGate::none, AttnGate::head, AttnGate::elementwise};
      const char* sinks[] = {"none", "one", "learned"};
      m.attn_gate = gates[(i + 2 * pi) % 3];
      test::set_model_key(m, "model.attn_sink", sinks[(i / 2 + pi) % 3]);
      // σReparam on four of every eight cases (with μP, GQA, gated MLPs and biases among them).
      m.sigma_reparam = i % 3 == 1 || i == 2;
      // Admin (post-norm sublayers, no residual scale): the profiled and the closed-form omega, on
      // the two cases of post and of mix (with post blocks) that have no residual scale.
      if ((pl == Placement::post || pl == Placement::mix) &&
          m.residual_scale == ResidualScale::none && m.mix_ratio > 0) {
        m.init = InitKind::admin;
        m.admin_omega = i % 2 == 0 ? AdminOmega::profile : AdminOmega::logn;
      }
      // HybridNorm*: block 0 Pre-Norm, on every third hybrid case.
      m.hybrid_first_pre = pl == Placement::hybrid && i % 3 == 1;
      // Biases per projection group: none, all (the shorthand), q/k/v only, output + MLP.
      m.bias = i % 4 == 1;
      m.attn_qkv_bias = i % 4 == 2;
      m.attn_out_bias = m.mlp_bias = i % 4 == 3;
      // Sliding windows shorter than T = 8: none, every layer, every 2nd layer global, a list
      // (last layer global) with the sliding layers' own RoPE base.
      const int w = (i + 3) % 4;
      if (w > 0) {
        m.sliding_window = w == 3 ? 5 : 3;
        if (w == 1) m.layer_pattern = "sliding";
        if (w == 2) m.layer_pattern = "every:2";
        if (w == 3) {
          m.layer_pattern.clear();
          for (int l = 0; l < m.n_layer; ++l)
            m.layer_pattern += l + 1 < m.n_layer ? "sliding," : "global";
          if (m.pos == PosKind::rope) m.rope_local_theta = 100.0;
        }
      }
      if (pl == Placement::ngpt) restrict_to_ngpt(m, i);
      // RoPE scaling, factors chosen so that every branch matters at these sizes: llama3 with an
      // original context of 16 puts the head's wavelengths on both sides of the blend.
      if (m.pos == PosKind::rope) {
        const RopeScaling rs[] = {RopeScaling::none, RopeScaling::linear, RopeScaling::llama3};
        m.rope_scaling = rs[i % 3];
        m.rope_factor = m.rope_scaling == RopeScaling::linear ? 2.0 : 8.0;
        if (m.rope_scaling == RopeScaling::none) m.rope_factor = 1.0;
        m.rope_original_seq_len = 16;
      }
      c.name = fmt::format("{}_{}_{}{}_{}_cap{}_z{}_{}_{}_bias{}_tie{}_H{}", i, to_string(pl),
                           to_string(m.norm), m.norm_bias ? "b" : "",
                           pl == Placement::ngpt ? "qkngpt" : q.name, caps ? 1 : 0,
                           c.z > 0 ? 1 : 0, to_string(m.pos), to_string(m.mlp), m.bias ? 1 : 0,
                           m.tie_embeddings ? 1 : 0, m.n_head);
      if (pl == Placement::mix) c.name += fmt::format("_mix{}", m.mix_ratio);
      if (m.norm_gain_offset != 0) c.name += "_gainoffset";
      if (m.embed_scale != 1) c.name += "_embedscale";
      if (m.attn_scale != 0) c.name += "_attnscale";
      if (m.parametrization == Parametrization::mup) c.name += "_mup";
      if (m.kv_heads() != m.n_head) c.name += fmt::format("_kv{}", m.kv_heads());
      if (m.head_dim > 0) c.name += fmt::format("_hd{}", m.head_dim);
      if (m.attn_qkv_bias) c.name += "_qkvbias";
      if (m.attn_out_bias) c.name += "_outmlpbias";
      if (m.sliding_window > 0)
        c.name += fmt::format("_win{}_{}", m.sliding_window,
                              w == 3 ? "list" : (w == 2 ? "every2" : "all"));
      if (m.rope_local_theta > 0) c.name += "_localrope";
      if (m.residual_scale != ResidualScale::none)
        c.name += fmt::format("_{}", to_string(m.residual_scale));
      if (m.sigma_reparam) c.name += "_sigma";
      if (m.rope_scaling != RopeScaling::none) c.name += fmt::format("_{}", to_string(m.rope_scaling));
      if (m.attn_gate != AttnGate::none) c.name += fmt::format("_gate{}", to_string(m.attn_gate));
      if (const std::string s = test::model_key(m, "attn_sink"); s != "none")
        c.name += fmt::format("_sink{}", s);
      if (pl == Placement::ngpt) c.name += fmt::format("_alpha{}", m.ngpt_alpha_init);
      if (m.init == InitKind::admin) c.name += fmt::format("_admin_{}", to_string(m.admin_omega));
      if (m.hybrid_first_pre) c.name += "_firstpre";
      for (char& ch : c.name)
        if (ch == '.') ch = 'p';
      out.push_back(c);
    }
  return out;
}

// The entries checked in a tensor of numel entries: all of them up to kCheckAll, else a fixed
// fraction kCheckFraction (at least kCheckAll), drawn without repetition.
constexpr long kCheckAll = 64;
constexpr double kCheckFraction = 0.125;
std::vector<long> entries_to_check(long numel, Rng& rng) {
  std::vector<long> all(numel);
  std::iota(all.begin(), all.end(), 0L);
  if (numel <= kCheckAll) return all;
  const long n = std::max(kCheckAll, static_cast<long>(std::ceil(kCheckFraction * numel)));
  for (long k = 0; k < n; ++k) std::swap(all[k], all[k + static_cast<long>(rng.below(numel - k))]);
  all.resize(n);
  return all;
}

// Central differences of the full loss against `analytic` (a gradient laid out like params())
// on entries_to_check() of every parameter tensor. One result per tensor, in table order.
struct TensorCheck {
  std::string name;
  TensorError err;
};
std::vector<TensorCheck> check_model(Transformer<double>& model, const std::vector<int>& idx,
                                     const std::vector<int>& tgt, int B, int T, double z,
                                     const std::vector<double>& analytic, Rng& rng) {
  auto loss = [&] { return model.forward(idx.data(), tgt.data(), B, T, z, false).loss; };
  const double h = 1e-5;
  std::vector<TensorCheck> out;
  for (const ParamSpec& s : model.table().specs()) {
    if (!s.trained) continue;  // buffers (σReparam's u, v): no gradient flows to them
    TensorCheck tc{s.name, {}};
    for (const long i : entries_to_check(s.numel, rng)) {
      double& w = model.params()[s.offset + i];
      const double w0 = w;
      w = w0 + h;
      const double lp = loss();
      w = w0 - h;
      const double lm = loss();
      w = w0;
      tc.err.add((lp - lm) / (2 * h), analytic[s.offset + i]);
    }
    out.push_back(std::move(tc));
  }
  return out;
}

// A batch and the analytic gradient of the loss on it.
struct Batch {
  std::vector<int> idx, tgt;
};
Batch random_batch(int B, int T, int V, Rng& rng) {
  Batch b;
  b.idx = random_tokens(B * T, V, rng);
  b.tgt = random_tokens(B * T, V, rng);
  return b;
}
std::vector<double> analytic_grad(Transformer<double>& model, const Batch& b, int B, int T,
                                  double z) {
  model.zero_grad();
  model.forward(b.idx.data(), b.tgt.data(), B, T, z, true);
  model.backward();
  return {model.grads().begin(), model.grads().end()};
}

// σReparam's state after perturb(): u, v back near the perturbed W's top singular vectors (so
// that sigma = u^T W v stays well away from 0) but not on them, gamma away from sigma (W_hat !=
// W).
void perturb_sigma_state(Transformer<double>& model, Rng& rng) {
  model.init_sigma_reparam();
  for (const ParamSpec& s : model.table().specs()) {
    double* x = model.params().data() + s.offset;
    if (s.name.ends_with(".sigma_gamma"))
      for (long i = 0; i < s.numel; ++i) x[i] *= 1.0 + 0.3 * rng.normal();
    if (s.name.ends_with(".sigma_u") || s.name.ends_with(".sigma_v"))
      for (long i = 0; i < s.numel; ++i) x[i] += 0.05 * rng.normal();
  }
}

class ModelGradCheck : public ::testing::TestWithParam<Case> {};

TEST_P(ModelGradCheck, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  const int B = 2, T = 8;
  Transformer<double> model(c.m, B, T);
  model.init_params(42);
  // Move every parameter away from its initial value so gains, biases and zeros all matter and
  // the attention/final caps saturate.
  Rng rng(99);
  perturb(model.params(), rng, 0.3);
  if (c.m.sigma_reparam) perturb_sigma_state(model, rng);
  const Batch batch = random_batch(B, T, c.m.vocab_size, rng);
  const std::vector<double> analytic = analytic_grad(model, batch, B, T, c.z);

  double worst = 0;
  for (const TensorCheck& tc : check_model(model, batch.idx, batch.tgt, B, T, c.z, analytic, rng)) {
    // Central differences of a loss of size ~3 carry about 1e-10 of rounding noise, so a tensor
    // whose gradient is below kFloor everywhere is checked absolutely (to kFloor * kTol = 1e-10)
    // rather than relatively. The key-norm bias is such a tensor: its true gradient is exactly
    // zero, since adding one vector to every key shifts a query's scores by a constant.
    const double rel = tc.err.rel(kFloor);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, kTol) << tc.name << " max|num|=" << tc.err.max_num
                         << " max|diff|=" << tc.err.max_diff << " non-finite=" << tc.err.non_finite;
  }
  report(fmt::format("model_{}", to_string(c.m.placement)), c.name, worst);
}

// The harness itself must fail on NaN: a running std::fmax drops NaN, so before TensorError an
// all-NaN gradient reported error 0 and passed.
TEST(ModelGradCheckHarness, NanBackwardFailsEveryTensor) {
  const int B = 2, T = 8;
  Transformer<double> model(tiny_model(), B, T);
  model.init_params(42);
  Rng rng(5);
  const Batch batch = random_batch(B, T, 32, rng);
  std::vector<double> analytic = analytic_grad(model, batch, B, T, 0.0);
  // Sanity: the true gradient passes.
  for (const TensorCheck& tc : check_model(model, batch.idx, batch.tgt, B, T, 0.0, analytic, rng))
    EXPECT_LT(tc.err.rel(kFloor), kTol) << tc.name;
  // A backward that returns NaN (the forward is fine).
  std::fill(analytic.begin(), analytic.end(), std::nan(""));
  for (const TensorCheck& tc : check_model(model, batch.idx, batch.tgt, B, T, 0.0, analytic, rng)) {
    EXPECT_GT(tc.err.non_finite, 0) << tc.name;
    EXPECT_FALSE(tc.err.rel(kFloor) < kTol) << tc.name;
  }
}

TEST(ModelGradCheckHarness, NanForwardAndBackwardFails) {
  const int B = 2, T = 8;
  Transformer<double> model(tiny_model(), B, T);
  model.init_params(42);
  Rng rng(5);
  const Batch batch = random_batch(B, T, 32, rng);
  // One NaN weight in the first block makes the loss and every gradient before it NaN.
  model.params()[model.table().find("blocks.0.attn.wqkv.weight")->offset] = std::nan("");
  const std::vector<double> analytic = analytic_grad(model, batch, B, T, 0.0);
  long failed = 0;
  for (const TensorCheck& tc : check_model(model, batch.idx, batch.tgt, B, T, 0.0, analytic, rng)) {
    EXPECT_GT(tc.err.non_finite, 0) << tc.name;
    failed += !(tc.err.rel(kFloor) < kTol);
  }
  EXPECT_EQ(failed, static_cast<long>(model.table().specs().size()));
}

INSTANTIATE_TEST_SUITE_P(Options, ModelGradCheck, ::testing::ValuesIn(make_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(ModelGradCheck, EveryOptionValueAppearsWithEveryPlacement) {
  const auto cases = make_cases();
  for (Placement pl : kPlacements) {
    std::map<std::string, std::set<std::string>> seen;  // option -> values met
    for (const auto& c : cases) {
      if (c.m.placement != pl) continue;
      const ModelConfig& m = c.m;
      seen["norm"].insert(fmt::format("{}{}", to_string(m.norm), m.norm_bias ? "+bias" : ""));
      const bool qk = m.qk_norm != QKNormKind::none;
      seen["qk"].insert(fmt::format("{}/{}/{}", to_string(m.qk_norm),
                                    qk ? to_string(m.qk_norm_scope) : "",
                                    qk ? to_string(m.qk_norm_position) : ""));
      seen["cap"].insert(fmt::format("{}", m.attn_softcap));
      seen["z"].insert(fmt::format("{}", c.z));
      seen["pos"].insert(std::string(to_string(m.pos)));
      seen["mlp"].insert(std::string(to_string(m.mlp)));
      seen["bias"].insert(fmt::format("{}", m.bias));
      seen["tie"].insert(fmt::format("{}", m.tie_embeddings));
      seen["heads"].insert(fmt::format("{}", m.n_head));
      seen["norm_gain_offset"].insert(fmt::format("{}", m.norm_gain_offset));
      seen["embed_scale"].insert(fmt::format("{}", m.embed_scale));
      seen["attn_scale"].insert(fmt::format("{}", m.attn_scale));
      seen["parametrization"].insert(std::string(to_string(m.parametrization)));
      seen["kv"].insert(m.kv_heads() == m.n_head ? "mha" : (m.kv_heads() == 1 ? "mqa" : "gqa"));
      seen["head_dim"].insert(m.head_dim > 0 ? "explicit" : "auto");
      seen["biases"].insert(fmt::format("{}{}{}", m.has_qkv_bias(), m.has_out_bias(),
                                        m.has_mlp_bias()));
      seen["window"].insert(m.sliding_window == 0 ? "none"
                            : m.layer_pattern.find(',') != std::string::npos ? "list"
                                                                             : m.layer_pattern);
      seen["local_rope"].insert(fmt::format("{}", m.rope_local_theta > 0));
      seen["residual_scale"].insert(std::string(to_string(m.residual_scale)));
      seen["attn_gate"].insert(std::string(to_string(m.attn_gate)));
      seen["attn_sink"].insert(test::model_key(m, "attn_sink"));
      seen["sigma_reparam"].insert(fmt::format("{}", m.sigma_reparam));
      if (pl == Placement::ngpt) seen["ngpt_alpha_init"].insert(fmt::format("{}", m.ngpt_alpha_init));
      seen["init"].insert(m.init == InitKind::admin
                              ? fmt::format("admin/{}", to_string(m.admin_omega))
                              : std::string(to_string(m.init)));
      if (pl == Placement::hybrid)
        seen["hybrid_first_pre"].insert(fmt::format("{}", m.hybrid_first_pre));
      if (m.pos == PosKind::rope) seen["rope_scaling"].insert(std::string(to_string(m.rope_scaling)));
      if (pl == Placement::mix) {
        const ModelPlan plan = build_plan(m);
        const auto n_post = std::count_if(plan.blocks.begin(), plan.blocks.end(),
                                          [](const BlockPlan& b) { return b.mlp.norm_after_add; });
        seen["mix_post_blocks"].insert(fmt::format("{}/{}", n_post, m.n_layer));
        seen["final_norm"].insert(fmt::format("{}", plan.final_norm));
      }
    }
    std::map<std::string, std::size_t> want = {
        {"norm", std::size(kNorms)}, {"qk", std::size(kQk)},  {"cap", 2},   {"z", 2},
        {"pos", 2},         {"mlp", 4}, {"bias", 2},  {"tie", 2},
        {"heads", 4},  // 1, 2, 3 and 4 heads
        {"norm_gain_offset", 2}, {"embed_scale", 2}, {"attn_scale", 2}, {"parametrization", 2},
        {"kv", 3},  // MHA, GQA, MQA
        {"head_dim", 2}, {"biases", 4}, {"window", 4}, {"local_rope", 2}, {"rope_scaling", 3},
        {"attn_gate", 3}, {"attn_sink", 3}};
    // Every residual scale where the placement allows it; DeepNorm allows none.
    want["residual_scale"] = pl == Placement::deepnorm ? 1 : 4;
    want["sigma_reparam"] = 2;  // every placement allows it
    if (pl == Placement::ngpt) {
      // One value where nGPT refuses the others (compat.cpp); two initial alphas of its own.
      for (const char* one : {"norm", "qk", "pos", "mlp", "bias", "norm_gain_offset", "embed_scale",
                              "parametrization", "kv", "biases", "residual_scale", "sigma_reparam",
                              "attn_gate", "attn_sink"})
        want[one] = 1;
      want["ngpt_alpha_init"] = 2;
    }
    // Admin (both omegas) where there are post-norm sublayers: post and mix.
    want["init"] = pl == Placement::post || pl == Placement::mix ? 3 : 1;
    if (pl == Placement::hybrid) want["hybrid_first_pre"] = 2;
    if (pl == Placement::mix) {
      want["mix_post_blocks"] = 3;  // 0 (all pre), 2 and 3 (all post) of 3 blocks
      want["final_norm"] = 2;       // all post has none
    }
    for (const auto& [opt, n] : want)
      EXPECT_EQ(seen[opt].size(), n) << to_string(pl) << " " << opt << ": "
                                     << fmt::format("{}", fmt::join(seen[opt], ", "));
    EXPECT_EQ(seen.size(), want.size()) << to_string(pl);
  }
}

}  // namespace
}  // namespace normlab::test
