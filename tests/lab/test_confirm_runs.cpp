// doctor --confirm on real (tiny) runs, through the library: doctor's diagnosis of a run, the
// confirmation's arms trained as sweep points, measured and judged. (1) attention-logit growth at
// a high lr: QK-Norm and a lower lr confirmed, the control (from step 0, QK-Norm changing the
// model) replaying the run bitwise; (7) from a checkpoint: the control's seed 0 replays the
// original bitwise over the window; (4) a one-off injected loss spike: the control does not
// reproduce it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "doctor/doctor.h"
#include "fixtures.h"
#include "lab/confirm_session.h"
#include "lab/sweep.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

// The tiny run at lr `lr` without warmup, diagnostics every 5 steps, a checkpoint every 10.
Config confirm_unstable(double lr, int steps) {
  Config c = test::tiny_run(steps);
  c.optim.lr = lr;
  c.optim.warmup_steps = 0;
  c.diag.interval = 5;
  c.train.checkpoint_interval = 10;
  c.train.keep_checkpoints = 20;
  c.train.threads = 1;
  return c;
}

// The diagnosis with only the finding `kind`, its remedies replaced by `remedies` (JSON).
nlohmann::json confirm_only(const nlohmann::json& diag, const std::string& kind,
                            const nlohmann::json& remedies) {
  nlohmann::json d = diag;
  nlohmann::json kept = nlohmann::json::array();
  for (auto f : diag["findings"])
    if (f["kind"] == kind && f["severity"] == "problem") {
      f["remedies"] = remedies;
      kept.push_back(f);
    }
  d["findings"] = kept;
  return d;
}

std::vector<Confirmation> confirm_all(const std::string& run, const nlohmann::json& diag,
                                      int seeds) {
  const Config cfg = diagnose_run(run).config;
  ConfirmOptions o;
  o.seeds = seeds;
  auto jobs = confirm_jobs(run, diag, cfg, o);
  prepare_confirm_jobs(jobs, run, o);
  for (const auto& j : jobs)
    for (std::size_t i = 0; i < j.arms.points.size(); ++i)
      run_sweep_point(j.arms.configs[i], (fs::path(j.out) / j.arms.points[i].name).string(), {});
  return finish_confirmation(jobs, run, diag, cfg, o);
}

std::string confirm_dump(const Confirmation& c) { return to_json(c).dump(1); }

TEST(ConfirmRuns, AttentionLogitGrowthQkNormAndLowerLrConfirmed) {
  const std::string run = test::temp_dir("confirm_attn");
  {
    Trainer t(confirm_unstable(0.1, 40), run, false);
    t.run();
  }
  // doctor's own remedies for the problem (QK-Norm, a lower lr, a soft-cap), the other findings
  // left out.
  nlohmann::json diag = to_json(diagnose_run(run));
  nlohmann::json kept = nlohmann::json::array();
  for (const auto& f : diag["findings"])
    if (f["kind"] == "attention_logit_growth") kept.push_back(f);
  diag["findings"] = kept;
  ASSERT_EQ(kept.size(), 1u) << to_json(diagnose_run(run)).dump(1);
  const auto cs = confirm_all(run, diag, 3);
  ASSERT_EQ(cs.size(), 1u);
  const Confirmation& c = cs[0];
  if (std::getenv("NORMLAB_CONFIRM_DUMP")) std::printf("%s\n", confirm_dump(c).c_str());
  EXPECT_EQ(c.plan.start_step, 0) << confirm_dump(c);  // QK-Norm changes the model: from step 0
  EXPECT_TRUE(c.replay_bitwise) << c.replay_check;
  std::map<std::string, RemedyVerdict> by;
  for (std::size_t i = 0; i < c.verdicts.size(); ++i) by[c.arms[i + 1].name] = c.verdicts[i];
  ASSERT_TRUE(by.count("qk_norm-rmsnorm")) << confirm_dump(c);
  EXPECT_EQ(by["qk_norm-rmsnorm"].verdict, "confirmed") << confirm_dump(c);
  EXPECT_GE(by["qk_norm-rmsnorm"].control_present, 2);
  EXPECT_EQ(by["qk_norm-rmsnorm"].treatment_present, 0);
  // doctor's lower learning rate, lr / 3 (its arm is named by the value: lr-0.0333)
  const auto lr = std::find_if(by.begin(), by.end(),
                               [](const auto& kv) { return kv.first.rfind("lr-0.0333", 0) == 0; });
  ASSERT_NE(lr, by.end()) << confirm_dump(c);
  EXPECT_EQ(lr->second.verdict, "confirmed") << confirm_dump(c);
  fs::remove_all(run);
}

TEST(ConfirmRuns, FromACheckpointTheControlReplaysBitwiseAndAnInjectedSpikeDoesNotComeBack) {
  const std::string run = test::temp_dir("confirm_inject");
  {
    Config cfg = confirm_unstable(0.01, 60);
    cfg.train.spike_policy = SpikePolicy::off;  // the injected spike is logged, not skipped
    Trainer t(cfg, run, false);
    TrainHooks h;
    h.inject = [](long step, std::span<float>, double& loss) {
      if (step == 40) loss += 20;  // step 41's logged loss; the update is the step's own
    };
    t.run(h);
  }
  const nlohmann::json diag =
      confirm_only(to_json(diagnose_run(run)), "loss_spikes", nlohmann::json::parse(R"([
      {"text": "lower the learning rate", "set": {"optim.lr": "0.005"}, "tried": false}])"));
  ASSERT_EQ(diag["findings"].size(), 1u) << to_json(diagnose_run(run)).dump(1);
  const auto cs = confirm_all(run, diag, 3);
  ASSERT_EQ(cs.size(), 1u);
  const Confirmation& c = cs[0];
  if (std::getenv("NORMLAB_CONFIRM_DUMP")) std::printf("%s\n", confirm_dump(c).c_str());
  // onset 41, margin 5: the checkpoint of step 30; window 41 + max(10, 11) = 52.
  EXPECT_EQ(c.plan.start_step, 30) << confirm_dump(c);
  EXPECT_EQ(c.plan.window_end, 52);
  // The replay differs from the original exactly at the injected step (the loss logged), and
  // nowhere before it: the injection is not in the config.
  EXPECT_FALSE(c.replay_bitwise);
  EXPECT_NE(c.replay_check.find("differs at step 41: loss"), std::string::npos) << c.replay_check;
  ASSERT_EQ(c.verdicts.size(), 1u);
  EXPECT_EQ(c.verdicts[0].verdict, "control did not reproduce") << confirm_dump(c);
  EXPECT_EQ(c.verdicts[0].control_present, 0);
  fs::remove_all(run);
}

}  // namespace
}  // namespace normlab
