// One training step: TrainStep's gradient over micro-batches equals the gradient of the whole
// batch at once, its loss parts are the means over the global batch, its gradient norm is the
// norm of what it leaves in the arena; and the guard's decision table.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "normlab/communicator.h"
#include "fixtures.h"
#include "model/transformer.h"
#include "normlab/communicator.h"
#include "normlab/data.h"
#include "train/guard.h"
#include "train/optimizer.h"
#include "train/optimizers/adamw.h"
#include "train/step.h"

namespace normlab {
namespace {

using test::tiny_model;

// Deterministic token rows (vocabulary 32): row r of a (rows, T) batch.
void fill_rows(int* idx, int* tgt, int first_row, int rows, int T) {
  for (int r = 0; r < rows; ++r)
    for (int t = 0; t < T; ++t) {
      const int i = r * T + t, g = (first_row + r) * T + t;
      idx[i] = (g * 37 + 11) % 32;
      tgt[i] = (g * 53 + 7) % 32;
    }
}

TEST(TrainStep, MicroBatchesGiveTheWholeBatchGradient) {
  const ModelConfig mc = tiny_model();
  const int T = mc.seq_len;
  const auto comm = make_single_process_communicator();
  Transformer<float> whole(mc, 4, T), micro(mc, 2, T);
  whole.init_params(5);
  micro.init_params(5);
  int calls = 0;
  TrainStep one(whole, *comm, {4, T, 1, 1e-3});
  TrainStep two(micro, *comm, {2, T, 2, 1e-3});
  const StepResult a = one.run([&](int* i, int* t) { fill_rows(i, t, 0, 4, T); });
  const StepResult b = two.run([&](int* i, int* t) { fill_rows(i, t, 2 * calls++, 2, T); });
  EXPECT_EQ(calls, 2);
  EXPECT_NEAR(a.loss.loss, b.loss.loss, 1e-6);
  EXPECT_NEAR(a.loss.ce, b.loss.ce, 1e-6);
  EXPECT_NEAR(a.loss.z_loss, b.loss.z_loss, 1e-9);
  EXPECT_NEAR(a.loss.lse_mean, b.loss.lse_mean, 1e-6);
  EXPECT_GT(a.loss.z_loss, 0);
  EXPECT_NEAR(a.loss.loss, a.loss.ce + a.loss.z_loss, 1e-9);
  EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-5 * a.grad_norm);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < whole.grads().size(); ++i) {
    worst = std::max(worst, std::abs(double(whole.grads()[i]) - micro.grads()[i]));
    scale = std::max(scale, std::abs(double(whole.grads()[i])));
  }
  EXPECT_LT(worst, 1e-5 * scale);
  // The norm is that of the arena the step leaves.
  double ss = 0;
  for (float g : whole.grads()) ss += double(g) * g;
  EXPECT_NEAR(a.grad_norm, std::sqrt(ss), 1e-9 * a.grad_norm);
}

TEST(TrainStep, ASecondStepStartsFromZeroGradients) {
  const ModelConfig mc = tiny_model();
  const auto comm = make_single_process_communicator();
  Transformer<float> model(mc, 2, mc.seq_len);
  model.init_params(1);
  TrainStep step(model, *comm, {2, mc.seq_len, 1, 0.0});
  const NextBatch batch = [&](int* i, int* t) { fill_rows(i, t, 0, 2, mc.seq_len); };
  const StepResult a = step.run(batch);
  const std::vector<float> g1(model.grads().begin(), model.grads().end());
  const StepResult b = step.run(batch);
  EXPECT_EQ(a.loss.loss, b.loss.loss);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  EXPECT_TRUE(std::equal(g1.begin(), g1.end(), model.grads().begin()));
}

TEST(TrainStep, AfterBackwardSeesTheGradientBeforeTheNorm) {
  const ModelConfig mc = tiny_model();
  const auto comm = make_single_process_communicator();
  Transformer<float> model(mc, 2, mc.seq_len);
  model.init_params(1);
  TrainStep step(model, *comm, {2, mc.seq_len, 1, 0.0});
  const StepResult r = step.run([&](int* i, int* t) { fill_rows(i, t, 0, 2, mc.seq_len); }, false,
                                [](std::span<float> g, double& loss) {
                                  g[0] = std::numeric_limits<float>::infinity();
                                  loss = 42;
                                });
  EXPECT_EQ(r.loss.loss, 42);
  EXPECT_TRUE(std::isinf(r.grad_norm));
}

// Clipping is decided by the step (its clip factor, as torch.nn.utils.clip_grad_norm_) and
// applied by the optimizer as it reads the gradients: the update equals AdamW on gradients
// scaled beforehand, bitwise, and the gradients are left clipped.
TEST(TrainStep, ClipFactorIsTorchsRuleAndTheOptimizerAppliesIt) {
  EXPECT_EQ(clip_scale(0.0, 5.0), 1.0);  // off
  EXPECT_EQ(clip_scale(10.0, 5.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_scale(1.0, 4.0), 1.0 / (4.0 + 1e-6));
  const ModelConfig mc = tiny_model();
  const auto comm = make_single_process_communicator();
  Transformer<float> model(mc, 2, mc.seq_len);
  model.init_params(1);
  const auto batch = [&](int* i, int* t) { fill_rows(i, t, 0, 2, mc.seq_len); };
  StepShape shape{2, mc.seq_len, 1, 0.0};
  shape.grad_clip = 0.05;
  TrainStep step(model, *comm, shape);
  const StepResult r = step.run(batch);
  ASSERT_GT(r.grad_norm, shape.grad_clip);  // the clip is active in this case
  EXPECT_EQ(r.clip_scale, clip_scale(shape.grad_clip, r.grad_norm));
  EXPECT_LT(r.clip_scale, 1.0);
  const float k = static_cast<float>(r.clip_scale);
  std::vector<float> g(model.grads().begin(), model.grads().end());
  std::vector<float> p(model.params().begin(), model.params().end());
  for (float& x : g) x *= k;  // clipped beforehand
  OptimConfig oc;
  AdamW<float> fused(model.table(), oc), plain(model.table(), oc);
  fused.update(model.params(), model.grads(), 1e-2, r.clip_scale);
  plain.update(p, g, 1e-2);
  for (std::size_t i = 0; i < p.size(); ++i) {
    ASSERT_EQ(model.params()[i], p[i]) << "parameter " << i;
    ASSERT_EQ(model.grads()[i], g[i]) << "gradient " << i;
  }
}

TEST(TrainStep, MeanLossIsTheMeanOverBatches) {
  ModelConfig mc = tiny_model();
  mc.vocab_size = 256;  // the embedded corpus's bytes
  Transformer<float> model(mc, 2, mc.seq_len);
  model.init_params(3);
  const TokenCorpus corpus = TokenCorpus::embedded();
  EvalBatches ev(corpus.view(), 2, mc.seq_len, 3);
  double sum = 0;
  std::vector<int> idx(2 * mc.seq_len), tgt(idx.size());
  for (int k = 0; k < 3; ++k) {
    ev.fill(k, idx.data(), tgt.data());
    sum += model.forward(idx.data(), tgt.data(), 2, mc.seq_len, 0.0, false).ce;
  }
  EXPECT_DOUBLE_EQ(mean_loss(model, ev), sum / 3);
}

TEST(SpikeGuardDecide, NonFiniteIsSkippedSpikeFollowsThePolicy) {
  const double nan = std::nan("");
  for (SpikePolicy pol : {SpikePolicy::off, SpikePolicy::skip, SpikePolicy::rollback}) {
    SpikeGuard g(4, 3.0);
    for (int k = 0; k < 4; ++k) {
      const StepDecision d = g.decide(2.0 + 0.01 * k, 1.0 + 0.01 * k, pol, true);
      EXPECT_EQ(d.action, StepAction::update);
      EXPECT_FALSE(d.spike);
      EXPECT_EQ(d.bad_run, 0);
    }
    const StepDecision n = g.decide(nan, 1.0, pol, true);
    EXPECT_EQ(n.action, StepAction::skip);
    EXPECT_FALSE(n.finite);
    EXPECT_EQ(n.bad_run, 1);
    const StepDecision s = g.decide(100.0, 1.0, pol, true);
    EXPECT_TRUE(s.spike);
    const StepAction want = pol == SpikePolicy::off    ? StepAction::update
                            : pol == SpikePolicy::skip ? StepAction::skip
                                                       : StepAction::rollback;
    EXPECT_EQ(s.action, want);
    EXPECT_EQ(s.bad_run, want == StepAction::update ? 0 : 2);
  }
}

TEST(SpikeGuardDecide, RollbackWithoutCheckpointFallsBackToSkip) {
  SpikeGuard g(2, 3.0);
  g.decide(2.0, 1.0, SpikePolicy::rollback, false);
  g.decide(2.1, 1.1, SpikePolicy::rollback, false);
  const StepDecision d = g.decide(50.0, 1.0, SpikePolicy::rollback, false);
  EXPECT_TRUE(d.spike);
  EXPECT_EQ(d.action, StepAction::skip);
  EXPECT_TRUE(d.rollback_unavailable);  // the status line says it fell back to a skip
  // A skip the policy chose is no fallback.
  SpikeGuard s(2, 3.0);
  s.decide(2.0, 1.0, SpikePolicy::skip, false);
  s.decide(2.1, 1.1, SpikePolicy::skip, false);
  EXPECT_FALSE(s.decide(50.0, 1.0, SpikePolicy::skip, false).rollback_unavailable);
}

TEST(SpikeGuard, AShorterWindowOnResumeKeepsTheNewestSteps) {
  SpikeGuard a(4, 3.0);
  for (double l : {1.0, 2.0, 3.0, 4.0}) a.record(l, l);
  SpikeGuard b(2, 3.0);  // train.spike_window lowered on resume
  b.from_json(a.to_json(), true);
  EXPECT_EQ(b.to_json()["loss"], nlohmann::json({3.0, 4.0}));
  EXPECT_EQ(b.to_json()["grad_norm"], nlohmann::json({3.0, 4.0}));
}

TEST(SpikeGuardDecide, RolledBackStepsStayOutOfTheWindowSkippedOnesEnterIt) {
  SpikeGuard a(2, 3.0), b(2, 3.0);
  for (SpikeGuard* g : {&a, &b}) {
    g->decide(2.0, 1.0, SpikePolicy::skip, true);
    g->decide(2.1, 1.1, SpikePolicy::skip, true);
  }
  EXPECT_EQ(a.decide(50.0, 1.0, SpikePolicy::skip, true).action, StepAction::skip);
  EXPECT_EQ(b.decide(50.0, 1.0, SpikePolicy::rollback, true).action, StepAction::rollback);
  // a's window now holds the skipped 50.0; b's does not.
  EXPECT_NE(a.to_json(), b.to_json());
  EXPECT_EQ(b.to_json()["loss"], nlohmann::json({2.0, 2.1}));
}

}  // namespace
}  // namespace normlab
