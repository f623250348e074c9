// doctor --confirm's plan and verdict rules on synthetic inputs (docs/doctor.md, "Confirming a
// remedy"): the start (newest intact checkpoint a margin before the onset, else step 0; step 0
// when a remedy changes a key fixed on resume), the window (onset + the time it took to appear,
// within the run, capped), the arms (tried remedies and ones without config changes not run), and
// each verdict with the numbers that decide it.
#include <gtest/gtest.h>

#include <cmath>

#include "lab/confirm.h"
#include "lab/confirm_doctor.h"
#include "lab/confirm_run.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

ConfirmProblem confirm_attn_problem(long onset) {
  ConfirmProblem p;
  p.kind = "attention_logit_growth";
  p.statistic = "attn_max_logit";
  p.onset_step = onset;
  p.remedies = {{"lower the learning rate", {{"optim.lr", "0.001"}}, false},
                {"QK-Norm", {{"model.qk_norm", "rmsnorm"}}, false},
                {"already there", {{"optim.grad_clip", "1"}}, true},
                {"read the paper", {}, false}};
  return p;
}

Config confirm_run_cfg(int steps) {
  Config c;
  c.train.steps = steps;
  return c;
}

const std::vector<std::pair<long, std::string>> kConfirmCkpts = {
    {50, "R/checkpoints/step_00000050"},
    {100, "R/checkpoints/step_00000100"},
    {150, "R/checkpoints/step_00000150"}};

TEST(ConfirmPlan, StartsAtTheNewestCheckpointAMarginBeforeTheOnset) {
  ConfirmProblem p = confirm_attn_problem(108);
  p.remedies.erase(p.remedies.begin() + 1);  // no model change: arms may resume
  // margin = max(5, ceil(10.8)) = 11: step <= 97, so step 50 (100 is too close to the onset).
  const ConfirmPlan plan = plan_confirmation(p, confirm_run_cfg(300), kConfirmCkpts, 300, 3, 0);
  EXPECT_EQ(plan.start_step, 50);
  EXPECT_EQ(plan.start_checkpoint, "R/checkpoints/step_00000050");
  // onset 108 + max(10, 1.0 * (108 - 50)) = 166
  EXPECT_EQ(plan.window_end, 166);
  ASSERT_EQ(plan.arms.size(), 3u);  // control, lower lr, not expressible (the tried one left out)
  EXPECT_EQ(plan.arms[0].name, "control");
  EXPECT_TRUE(plan.arms[1].cannot.empty());
  EXPECT_EQ(plan.arms[2].cannot, "not expressible as config changes");
  EXPECT_EQ(plan.arms_run(), 2);
  EXPECT_EQ(plan.estimated_steps(), 2 * 3 * (166 - 50));
  ASSERT_EQ(plan.notes.size(), 1u);
  EXPECT_NE(plan.notes[0].find("already tried"), std::string::npos);
  // The arm's config: the change, the data order and the window's end; nothing else.
  const Config c = arm_config(plan, plan.arms[1], confirm_run_cfg(300), 2);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.001);
  EXPECT_EQ(c.train.data_seed, 2u);
  EXPECT_EQ(c.train.stop_at, 166);
  EXPECT_EQ(c.train.steps, 300);
}

TEST(ConfirmPlan, AModelChangeOrNoCheckpointStartsAtStepZeroAndTheWindowIsCapped) {
  const ConfirmPlan plan =
      plan_confirmation(confirm_attn_problem(108), confirm_run_cfg(300), kConfirmCkpts, 300, 3, 0);
  EXPECT_EQ(plan.start_step, 0);
  EXPECT_NE(plan.start_why.find("model.qk_norm cannot change on resume"), std::string::npos)
      << plan.start_why;
  EXPECT_EQ(plan.window_end, 216);  // 108 + 108
  ConfirmProblem p = confirm_attn_problem(30);
  p.remedies.resize(1);
  const ConfirmPlan early = plan_confirmation(p, confirm_run_cfg(300), kConfirmCkpts, 300, 2, 0);
  EXPECT_EQ(early.start_step, 0);  // no checkpoint at or before 25
  EXPECT_EQ(early.window_end, 60);
  const ConfirmPlan late =
      plan_confirmation(confirm_attn_problem(250), confirm_run_cfg(300), kConfirmCkpts, 300, 1, 0);
  EXPECT_EQ(late.window_end, 300);  // to the run's end
  const ConfirmPlan capped = plan_confirmation(confirm_attn_problem(250), confirm_run_cfg(300),
                                               kConfirmCkpts, 300, 1, 100);
  EXPECT_EQ(capped.window_end, 100);
  EXPECT_NE(capped.notes.back().find("before the onset"), std::string::npos);
  EXPECT_THROW(plan_confirmation(p, confirm_run_cfg(300), kConfirmCkpts, 300, 0, 0), ConfigError);
}

ArmResult confirm_arm(const char* name, std::vector<double> stat, std::vector<double> loss,
                      std::vector<bool> diverged = {}) {
  ArmResult a;
  a.name = name;
  a.stat = std::move(stat);
  a.loss_end = std::move(loss);
  a.diverged = diverged.empty() ? std::vector<bool>(a.stat.size(), false) : std::move(diverged);
  a.status.assign(a.stat.size(), "done");
  return a;
}

TEST(ConfirmVerdict, ConditionInMostControlsAndNoTreatmentIsConfirmed) {
  const auto v = judge_remedy(confirm_arm("control", {320, 290, 150}, {2.0, 2.1, 2.0}),
                              confirm_arm("remedy1", {40, 45, 38}, {2.0, 2.05, 2.02}), 200.0);
  EXPECT_EQ(v.verdict, "confirmed") << v.reason;
  EXPECT_EQ(v.control_present, 2);
  EXPECT_EQ(v.treatment_present, 0);
  EXPECT_NEAR(v.diff_mean, (280 + 245 + 112) / 3.0, 1e-9);
}

TEST(ConfirmVerdict, ControlThatDoesNotComeBackIsSaid) {
  const auto v = judge_remedy(confirm_arm("control", {120, 300, 90}, {2.0, 2.1, 2.0}),
                              confirm_arm("remedy1", {40, 45, 38}, {2.0, 2.0, 2.0}), 200.0);
  EXPECT_EQ(v.verdict, "control did not reproduce") << v.reason;
  EXPECT_EQ(v.control_present, 1);
}

TEST(ConfirmVerdict, PersistingConditionIsNotConfirmed) {
  const auto v = judge_remedy(confirm_arm("control", {420, 390, 450}, {2.0, 2.1, 2.0}),
                              confirm_arm("remedy1", {260, 150, 240}, {2.0, 2.0, 2.0}), 200.0);
  EXPECT_EQ(v.verdict, "not confirmed") << v.reason;
  EXPECT_EQ(v.treatment_present, 2);
}

TEST(ConfirmVerdict, RemovedButLossWorseBeyondTheSpreadIsNotConfirmed) {
  const auto v = judge_remedy(confirm_arm("control", {320, 290, 310}, {2.00, 2.01, 2.02}),
                              confirm_arm("remedy1", {40, 45, 38}, {2.50, 2.52, 2.51}), 200.0);
  EXPECT_EQ(v.verdict, "not confirmed") << v.reason;
  EXPECT_NE(v.reason.find("loss is worse"), std::string::npos);
  // A treatment seed that diverged where the control did not: worse too.
  const auto w = judge_remedy(
      confirm_arm("control", {320, 290, 310}, {2.0, 2.0, 2.0}),
      confirm_arm("remedy1", {40, 45, 38}, {2.0, 2.0, NAN}, {false, false, true}), 200.0);
  EXPECT_EQ(w.verdict, "not confirmed") << w.reason;
}

TEST(ConfirmVerdict, ADifferenceWithinTheSpreadIsInconclusive) {
  // One treatment seed still crosses: neither removed nor beyond the spread.
  const auto v = judge_remedy(confirm_arm("control", {320, 210, 400}, {2.0, 2.1, 2.0}),
                              confirm_arm("remedy1", {330, 190, 160}, {2.0, 2.1, 2.0}), 200.0);
  EXPECT_EQ(v.verdict, "inconclusive") << v.reason;
  // No condition (loss_end): only the paired difference against the spread decides.
  const auto a =
      judge_remedy(confirm_arm("control", {3.0, 3.1, 3.05}, {3.0, 3.1, 3.05}),
                   confirm_arm("remedy1", {2.5, 2.55, 2.52}, {2.5, 2.55, 2.52}), std::nullopt);
  EXPECT_EQ(a.verdict, "confirmed") << a.reason;
  const auto b =
      judge_remedy(confirm_arm("control", {3.0, 3.1, 3.05}, {3.0, 3.1, 3.05}),
                   confirm_arm("remedy1", {3.02, 3.06, 3.0}, {3.02, 3.06, 3.0}), std::nullopt);
  EXPECT_EQ(b.verdict, "inconclusive") << b.reason;
}

TEST(ConfirmVerdict, MissingMeasurementsAndUnrunArms) {
  ArmResult t = confirm_arm("remedy1", {40, NAN, 38}, {2.0, 2.0, 2.0});
  t.status[1] = "failed";
  const auto v = judge_remedy(confirm_arm("control", {320, 290, 310}, {2.0, 2.0, 2.0}), t, 200.0);
  EXPECT_EQ(v.verdict, "inconclusive");
  EXPECT_NE(v.reason.find("remedy1 seed 1 (failed)"), std::string::npos) << v.reason;
  ArmResult c = confirm_arm("remedy2", {}, {});
  c.cannot = "cannot confirm: your command has no placeholder for model.qk_norm";
  EXPECT_EQ(judge_remedy(confirm_arm("control", {1}, {1}), c, 200.0).verdict, "cannot confirm");
}

TEST(ConfirmStatistic, MeasuredOnTheWindowOnly) {
  std::vector<nlohmann::json> r;
  for (long s = 1; s <= 10; ++s) {
    nlohmann::json j = {{"step", s},
                        {"loss", s == 7 ? 9.0 : 3.0 - 0.1 * s},
                        {"log_z_mean", 3.0 + (s > 6 ? 6.0 : 0.0)}};
    if (s % 2 == 0) j["attn_max_logit"] = {1.0 * s, 10.0 * s};
    r.push_back(j);
  }
  r.push_back({{"event", "end"}, {"step", 10}});
  EXPECT_DOUBLE_EQ(measure_statistic("attn_max_logit", r, 0, 10, 0), 100);
  EXPECT_DOUBLE_EQ(measure_statistic("attn_max_logit", r, 0, 7, 0), 60);
  EXPECT_DOUBLE_EQ(measure_statistic("spike_count", r, 0, 10, 0), 1);
  EXPECT_DOUBLE_EQ(measure_statistic("spike_count", r, 7, 10, 0), 0);
  EXPECT_DOUBLE_EQ(measure_statistic("log_z_drift", r, 0, 10, 0), 6);  // on >= 3 records
  EXPECT_DOUBLE_EQ(measure_statistic("log_z_drift", r, 0, 8, 0), 0);   // only 2 records
  EXPECT_DOUBLE_EQ(measure_statistic("loss_end", r, 0, 9, 0), 3.0 - 0.9);
  EXPECT_NEAR(measure_statistic("unigram_gap", r, 0, 10, 2.5), -0.5, 1e-12);
  EXPECT_TRUE(std::isnan(measure_statistic("resid_rms", r, 0, 10, 0)));
  EXPECT_TRUE(std::isnan(measure_statistic("dyt_saturated", r, 0, 10, 0)));
  // Diagnostics records without DyT sites (RMSNorm in their place): nothing saturates.
  r[3]["resid_rms"] = {1.0, 2.0};
  EXPECT_DOUBLE_EQ(measure_statistic("dyt_saturated", r, 0, 10, 0), 0);
  r[5]["dyt_saturated"] = {{"block0.attn", 0.7}};
  r[7]["dyt_saturated"] = {{"block0.attn", 0.6}, {"block0.mlp", 0.9}};
  EXPECT_DOUBLE_EQ(measure_statistic("dyt_saturated", r, 0, 10, 0), 0.7);  // 2nd largest
  EXPECT_TRUE(std::isnan(measure_statistic("loss_end", r, 10, 20, 0)));
}

TEST(ConfirmDoctor, ReadsStructuredRemediesAndTheStatistic) {
  const nlohmann::json d = nlohmann::json::parse(R"({"findings": [
      {"kind": "loss_spikes", "severity": "problem", "first_step": 40,
       "values": {"statistic": {"name": "spike_count", "value": 3, "threshold": 1,
                                "onset_step": 42}},
       "remedies": [{"text": "lower lr", "set": {"optim.lr": "0.001"}, "tried": false},
                    "plain advice"]},
      {"kind": "gradient_spikes", "severity": "note"}]})");
  Config c;
  c.optim.lr = 0.003;
  const auto ps = confirm_problems(d, c);
  ASSERT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps[0].statistic, "spike_count");
  EXPECT_EQ(ps[0].onset_step, 42);
  ASSERT_EQ(ps[0].remedies.size(), 2u);
  EXPECT_EQ(ps[0].remedies[0].set.at(0).second, "0.001");
  EXPECT_TRUE(ps[0].remedies[1].set.empty());
  // Plain-text remedies: the --set they name (known keys only); one the config holds is tried.
  const nlohmann::json t = nlohmann::json::parse(R"J({"findings": [
      {"kind": "attention_logit_growth", "severity": "problem", "first_step": 10, "remedies": [
        "QK-Norm: --set model.qk_norm=rmsnorm (normalizes queries), or --set model.nope=1.",
        "lower the learning rate: --set optim.lr=0.0030 (now 0.003)",
        "lower the learning rate (optim.lr = 0.003 now)"]}]})J");
  const auto qs = confirm_problems(t, c);
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_EQ(qs[0].statistic, "attn_max_logit");
  ASSERT_EQ(qs[0].remedies.size(), 3u);
  ASSERT_EQ(qs[0].remedies[0].set.size(), 1u);
  EXPECT_EQ(qs[0].remedies[0].set[0],
            std::make_pair(std::string("model.qk_norm"), std::string("rmsnorm")));
  EXPECT_FALSE(qs[0].remedies[0].tried);
  EXPECT_TRUE(qs[0].remedies[1].tried);
  EXPECT_TRUE(qs[0].remedies[2].set.empty());
  EXPECT_EQ(config_value_text(c, "optim.lr"), "0.003");
  EXPECT_EQ(config_value_text(c, "model.qk_norm"), "none");
}

}  // namespace
}  // namespace normlab
