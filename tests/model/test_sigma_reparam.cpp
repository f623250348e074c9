// σReparam in the model (model.sigma_reparam; model/sigma_reparam.cpp): the parameter table's
// gamma, u and v (u, v buffers without optimizer state), W_hat = W at initialisation, forward
// passes that never move u and v, and exactly one power-iteration step per training step however
// many micro-batches it has.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "fixtures.h"
#include "model/param_table.h"
#include "model/transformer.h"
#include "normlab/communicator.h"
#include "ops/sigma_reparam.h"
#include "train/optimizer.h"
#include "train/step.h"

namespace normlab {
namespace {

ModelConfig sigma_model(MlpKind mlp) {
  ModelConfig m = test::tiny_model();
  m.sigma_reparam = true;
  m.mlp = mlp;
  m.n_kv_head = 1;  // wqkv's row blocks of unequal heights: q 16, k 8, v 8
  return m;
}

TEST(SigmaReparam, TableDeclaresGammaUAndVPerBlockWeight) {
  const ModelConfig m = sigma_model(MlpKind::swiglu);
  const ParamLayout lay = build_param_table(m, build_plan(m));
  ASSERT_EQ(lay.slots.sigma.size(), 4u * m.n_layer);  // wqkv, wo, w_in, w_out per block
  const int C = m.d_model, D = m.head_size(), F = m.d_ff;
  struct Want {
    const char* w;
    std::int64_t out, in, blocks;
  };
  for (const Want& w : {Want{"attn.wqkv", C + 2 * D, C, 3}, Want{"attn.wo", C, C, 1},
                        Want{"mlp.w_in", 2 * F, C, 2}, Want{"mlp.w_out", C, F, 1}}) {
    const std::string base = std::string("blocks.1.") + w.w;
    const ParamSpec* g = lay.table.find(base + ".sigma_gamma");
    const ParamSpec* u = lay.table.find(base + ".sigma_u");
    const ParamSpec* v = lay.table.find(base + ".sigma_v");
    ASSERT_TRUE(g && u && v) << base;
    EXPECT_EQ(g->shape, std::vector<std::int64_t>{w.blocks}) << base;
    EXPECT_EQ(u->shape, std::vector<std::int64_t>{w.out}) << base;
    EXPECT_EQ(v->shape, (std::vector<std::int64_t>{w.blocks, w.in})) << base;
    EXPECT_TRUE(g->trained);
    EXPECT_FALSE(g->decay);
    EXPECT_FALSE(u->trained);
    EXPECT_FALSE(v->trained);
    EXPECT_FALSE(v->hidden_matrix()) << "Muon must not take v for a matrix";
  }
  // Embeddings and head are not reparametrized; nothing is without the option.
  EXPECT_EQ(lay.table.find("tok_emb.sigma_u"), nullptr);
  ModelConfig off = m;
  off.sigma_reparam = false;
  const ParamLayout plain = build_param_table(off, build_plan(off));
  EXPECT_TRUE(plain.slots.sigma.empty());
  for (const ParamSpec& s : plain.table.specs()) EXPECT_EQ(s.name.find("sigma"), std::string::npos);
  // No optimizer keeps state for the buffers.
  for (OptimizerKind k : {OptimizerKind::adamw, OptimizerKind::muon}) {
    OptimConfig oc;
    oc.name = k;
    const auto opt = make_optimizer<float>(lay.table, oc, m);
    for (const StateArena<float>* a : std::as_const(*opt).state())
      for (const StateEntry& e : a->entries) EXPECT_TRUE(e.param->trained) << e.name;
  }
}

// gamma = sigma(W_0) and u, v W_0's singular vectors: the model computes what the same weights
// compute without σReparam (the draws are the same: gamma, u and v draw nothing).
TEST(SigmaReparam, InitialModelEqualsThePlainOne) {
  for (MlpKind mlp : {MlpKind::gelu, MlpKind::swiglu}) {
    ModelConfig m = sigma_model(mlp), off = m;
    off.sigma_reparam = false;
    Transformer<double> a(m, 2, 8), b(off, 2, 8);
    a.init_params(7);
    b.init_params(7);
    for (const ParamSpec& s : b.table().specs()) {
      const ParamSpec* t = a.table().find(s.name);
      ASSERT_NE(t, nullptr);
      for (long i = 0; i < s.numel; ++i) ASSERT_EQ(a.param(*t)[i], b.param(s)[i]) << s.name;
    }
    Rng rng(3);
    const auto idx = test::random_tokens(16, m.vocab_size, rng);
    const auto tgt = test::random_tokens(16, m.vocab_size, rng);
    const double la = a.forward(idx.data(), tgt.data(), 2, 8, 0.0, false).loss;
    const double lb = b.forward(idx.data(), tgt.data(), 2, 8, 0.0, false).loss;
    EXPECT_NEAR(la, lb, 1e-9 * std::fabs(lb));
    // ...and gamma is W_0's largest singular value, per row block.
    const SigmaSlots& ss = a.sigma_sites()[0];
    ASSERT_EQ(ss.rows.size(), 3u);
    std::vector<double> u(ss.rows[0]), v(ss.in);
    for (int i = 0; i < ss.in; ++i) v[i] = 1.0 + 0.1 * i;
    const double s0 = ops::sigma_power_converge(u.data(), v.data(), a.params().data() + ss.w,
                                                ss.rows[0], ss.in, 5000, 1e-15);
    EXPECT_NEAR(a.params()[ss.gamma], s0, 1e-5 * s0);
  }
}

std::vector<float> sigma_state(const Transformer<float>& m) {
  std::vector<float> out;
  for (const ParamSpec& s : m.table().specs())
    if (!s.trained) out.insert(out.end(), m.params().begin() + s.offset,
                               m.params().begin() + s.offset + s.numel);
  return out;
}

// Forward passes (loss, logits, generation's cache) leave u and v alone; TrainStep moves them by
// one power-iteration step per step, with 1 or 3 micro-batches alike.
TEST(SigmaReparam, OnePowerStepPerTrainingStep) {
  const ModelConfig m = sigma_model(MlpKind::gelu);
  const auto comm = make_single_process_communicator();
  Transformer<float> model(m, 2, 8);
  model.init_params(11);
  Rng rng(4);
  test::perturb(model.params(), rng, 0.05);  // u, v off W's singular vectors
  const std::vector<float> s0 = sigma_state(model);
  const auto idx = test::random_tokens(16, m.vocab_size, rng);
  std::vector<float> logits(16 * m.vocab_size);
  model.forward(idx.data(), idx.data(), 2, 8, 0.0, false);
  model.forward_logits(idx.data(), 2, 8, logits.data());
  auto cache = model.make_cache();
  model.forward_cached(idx.data(), 4, cache, logits.data());
  EXPECT_TRUE(sigma_state(model) == s0);

  // The expected state: one step of every weight's row blocks by hand.
  Transformer<float> ref(m, 2, 8);
  std::copy(model.params().begin(), model.params().end(), ref.params().begin());
  for (const SigmaSlots& ss : ref.sigma_sites()) {
    long row0 = 0;
    for (std::size_t b = 0; b < ss.rows.size(); ++b) {
      ops::sigma_power_step(ref.params().data() + ss.u + row0,
                            ref.params().data() + ss.v + static_cast<long>(b) * ss.in,
                            ref.params().data() + ss.w + row0 * ss.in, ss.rows[b], ss.in);
      row0 += ss.rows[b];
    }
  }
  const std::vector<float> want = sigma_state(ref);
  EXPECT_FALSE(want == s0);
  for (int accum : {1, 3}) {
    Transformer<float> t(m, 2, 8);
    std::copy(model.params().begin(), model.params().end(), t.params().begin());
    TrainStep step(t, *comm, {2, 8, accum, 0.0});
    int calls = 0;
    step.run([&](int* i, int* g) {
      ++calls;
      std::copy(idx.begin(), idx.end(), i);
      std::copy(idx.begin(), idx.end(), g);
    });
    EXPECT_EQ(calls, accum);
    EXPECT_TRUE(sigma_state(t) == want) << "accum " << accum;
    // The gradient reaches gamma and W, never the buffers.
    for (const ParamSpec& s : t.table().specs()) {
      double n = 0;
      for (long i = 0; i < s.numel; ++i) n += std::fabs(t.grads()[s.offset + i]);
      if (!s.trained) {
        EXPECT_EQ(n, 0.0) << s.name;
      }
      if (s.name.ends_with(".sigma_gamma")) {
        EXPECT_GT(n, 0.0) << s.name;
      }
    }
  }
}

}  // namespace
}  // namespace normlab
