// The divergence rule (train/divergence.h) on synthetic loss curves: a spike that recovers is not
// a divergence, a blow-up is (stopped early, after the sustained span and not before), and so is
// a run that ends above where it started; a run too short to have learned is judged by its train
// loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/divergence.h"

namespace normlab {
namespace {

// A falling curve: 5.5 at step 1 to about 2.4 at the end.
double falling(long step, long steps) {
  return 2.4 + 3.1 * std::exp(-5.0 * static_cast<double>(step - 1) / static_cast<double>(steps));
}

// Feeds losses[i] as step i + 1; returns the step of the first early-stop reason (0: none).
long first_stop(DivergenceRule& rule, const std::vector<double>& losses,
                const std::vector<bool>& skipped = {}) {
  for (std::size_t i = 0; i < losses.size(); ++i)
    if (rule.observe(static_cast<long>(i) + 1, losses[i], !skipped.empty() && skipped[i]))
      return static_cast<long>(i) + 1;
  return 0;
}

TEST(DivergenceRule, SpanIsTenPercentOfTheRunAndAtLeastFiftySteps) {
  EXPECT_EQ(DivergenceRule(150).span(), 50);
  EXPECT_EQ(DivergenceRule(1000).span(), 100);
  EXPECT_EQ(DivergenceRule(1001).span(), 101);
}

TEST(DivergenceRule, ARecoveringSpikeIsNotDiverged) {
  // The case: one spike at step 21 far above the initial loss, then recovery. The old
  // rule (any logged loss above the initial loss after step 10) called this diverged.
  const long steps = 150;
  std::vector<double> l;
  for (long s = 1; s <= steps; ++s) l.push_back(falling(s, steps));
  l[20] = 40.0;                                   // step 21: a single huge spike
  for (long s = 60; s < 70; ++s) l[s - 1] = 7.0;  // and a ten-step bump above the initial loss
  DivergenceRule rule(steps);
  EXPECT_EQ(first_stop(rule, l), 0);
  EXPECT_DOUBLE_EQ(rule.initial_loss(), l[0]);
  EXPECT_FALSE(rule.judge_end(2.39, std::nullopt));
}

TEST(DivergenceRule, ABlowUpIsStoppedAfterTheSustainedSpan) {
  const long steps = 300;  // span 50
  std::vector<double> l;
  for (long s = 1; s <= steps; ++s) l.push_back(s < 40 ? falling(s, steps) : 20.0 + s);
  DivergenceRule rule(steps);
  const long stop = first_stop(rule, l);
  // The smoothed loss crosses the initial loss within a few steps of step 40, then must stay
  // above it for 50 steps (step 40 the first of them at the earliest), and not much longer.
  EXPECT_GE(stop, 40 + 49);
  EXPECT_LE(stop, 40 + 49 + 5);
  DivergenceRule again(steps);
  for (long s = 1; s < stop; ++s) EXPECT_FALSE(again.observe(s, l[s - 1], false)) << s;
  const auto why = again.observe(stop, l[stop - 1], false);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("above the initial loss"), std::string::npos) << *why;
  EXPECT_NE(why->find("step " + std::to_string(stop)), std::string::npos) << *why;
}

TEST(DivergenceRule, ARunEndingAboveItsInitialLossIsDiverged) {
  // It creeps back up in its last 30 steps: too short for the early stop, caught at the end.
  const long steps = 200;
  std::vector<double> l;
  for (long s = 1; s <= steps; ++s) l.push_back(s <= 170 ? falling(s, steps) : 6.0);
  DivergenceRule rule(steps);
  EXPECT_EQ(first_stop(rule, l), 0);
  const auto by_val = rule.judge_end(5.6, 2.0);  // the val loss wins over the train loss
  ASSERT_TRUE(by_val);
  EXPECT_NE(by_val->find("final val loss 5.6000 is not below the initial loss 5.5000"),
            std::string::npos) << *by_val;
  const auto by_train = rule.judge_end(std::nullopt, 6.0);
  ASSERT_TRUE(by_train);
  EXPECT_NE(by_train->find("final train loss"), std::string::npos) << *by_train;
  EXPECT_TRUE(rule.judge_end(5.5, std::nullopt));  // equal is not below
  EXPECT_FALSE(rule.judge_end(5.49, std::nullopt));
  EXPECT_TRUE(rule.judge_end(NAN, std::nullopt));  // ends non-finite
  EXPECT_FALSE(rule.judge_end(std::nullopt, std::nullopt));
}

TEST(DivergenceRule, NonFiniteStopsAtOnceUnlessTheGuardsSkippedIt) {
  std::vector<double> l(30, 4.0);
  l[0] = 5.0;
  l[12] = NAN;
  DivergenceRule skipped_rule(100);
  std::vector<bool> skipped(30, false);
  skipped[12] = true;
  EXPECT_EQ(first_stop(skipped_rule, l, skipped), 0);  // train.max_bad_steps is the guards' rule
  DivergenceRule rule(100);
  EXPECT_EQ(first_stop(rule, l), 13);
  l[12] = INFINITY;
  DivergenceRule inf_rule(100);
  EXPECT_EQ(first_stop(inf_rule, l), 13);
}

TEST(DivergenceRule, SkippedSpikesDoNotMoveTheSmoothedLoss) {
  DivergenceRule rule(100);
  EXPECT_FALSE(rule.observe(1, 5.0, false));
  EXPECT_FALSE(rule.observe(2, 4.0, false));
  const double before = rule.smoothed_loss();
  EXPECT_FALSE(rule.observe(3, 1e6, true));
  EXPECT_EQ(rule.smoothed_loss(), before);
  // The EMA's half-life: after 10 more steps at 0 the smoothed loss has halved.
  for (long s = 4; s < 14; ++s) rule.observe(s, 0.0, false);
  EXPECT_NEAR(rule.smoothed_loss(), before / 2, 1e-12);
}

TEST(DivergenceRule, AResumedRunKeepsItsInitialLoss) {
  DivergenceRule rule(100);
  rule.set_initial_loss(5.0);
  long stop = 0;
  for (long s = 41; s <= 100 && !stop; ++s)
    if (rule.observe(s, 6.0, false)) stop = s;
  EXPECT_EQ(stop, 41 + 49);  // 50 steps above from the first resumed step
}

TEST(DivergenceRule, AShortRunIsJudgedByItsTrainLossBlowingUp) {
  // 15 steps: fewer than kMinSpan. A run whose warmup is longer than it ends within noise of its
  // initial loss (here just above it): not diverged. One whose train loss blew up is, whatever its
  // val loss says.
  DivergenceRule rule(15);
  EXPECT_FALSE(rule.observe(1, 5.534, false));
  EXPECT_FALSE(rule.judge_end(5.547, 5.542));
  EXPECT_FALSE(rule.judge_end(std::nullopt, 5.542));
  EXPECT_FALSE(rule.judge_end(5.545, 2 * 5.534));  // twice the initial loss is not more than it
  const auto why = rule.judge_end(5.545, 1.29e9);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("final train loss 1.29e+09 is more than 2 times the initial loss 5.5340"),
            std::string::npos) << *why;
  EXPECT_TRUE(rule.judge_end(NAN, 5.0));  // a non-finite end is diverged at any length
  // From kMinSpan steps on, the final loss must be below the initial loss.
  DivergenceRule long_rule(DivergenceRule::kMinSpan);
  EXPECT_FALSE(long_rule.observe(1, 5.534, false));
  EXPECT_TRUE(long_rule.judge_end(5.547, 5.542));
}

}  // namespace
}  // namespace normlab
