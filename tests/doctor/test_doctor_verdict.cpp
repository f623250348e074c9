// doctor's verdict on runs that did not end well: a run that diverged (by the divergence rule of
// train, sweep and compare) leads with a `diverged` finding whose first remedy is the learning
// rate, taken from the run's sweep when it lies in one, else a tenfold cut; an interrupted run is
// judged on the steps it reached, or not judged when they are too few, never given a clean bill.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "doctor/doctor.h"
#include "fixtures.h"
#include "normlab/metrics.h"
#include "normlab/trainer.h"
#include "train/divergence.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

// Tiny Pre-Norm at lr 3 without warmup or clipping: its loss blows up to tens of nats and stays
// there; the rule stops it early (50 steps above the initial loss) around step 51.
Config blow_up(int steps) {
  Config c = test::tiny_run(steps);
  c.train.threads = 1;
  c.train.log_interval = 5;
  c.optim.lr = 3;
  c.optim.warmup_steps = 0;
  c.optim.grad_clip = 0;
  return c;
}

std::string fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("normlab_verdict_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

TEST(DoctorVerdict, ADivergedRunLeadsWithDivergedAndATenfoldLearningRateCut) {
  const std::string dir = fresh_dir("diverged");
  Trainer t(blow_up(150), dir, false);
  const TrainResult res = t.run(with_divergence_rule({}, t, dir));
  ASSERT_TRUE(res.diverged);
  EXPECT_LT(res.stop_step, 150);  // stopped early
  const Diagnosis d = diagnose_run(dir);
  ASSERT_FALSE(d.findings.empty());
  const DoctorFinding& f = d.findings.front();
  EXPECT_EQ(f.kind, "diverged") << d.verdict();
  EXPECT_EQ(f.severity, "problem");
  EXPECT_EQ(f.first_step, res.stop_step);
  ASSERT_FALSE(f.remedies.empty());
  EXPECT_EQ(f.remedies.front().text.rfind(
                "lower optim.lr to 0.3 (--set optim.lr=0.3): a tenfold cut", 0),
            0u)
      << f.remedies.front().text;
  // As data: the change doctor --confirm applies.
  EXPECT_EQ(f.remedies.front().set,
            (std::vector<std::pair<std::string, std::string>>{{"optim.lr", "0.3"}}));
  EXPECT_FALSE(f.remedies.front().tried);
  EXPECT_EQ(f.values["statistic"]["name"], "loss_end");
  EXPECT_EQ(f.values["lr_source"], "tenfold");
  // The loss-spike finding that follows names the same learning rate, not one of its own.
  bool spikes = false;
  for (const auto& s : d.findings)
    if (s.kind == "loss_spikes") {
      spikes = true;
      EXPECT_EQ(s.remedies.front().text.rfind(
                    "lower the learning rate: --set optim.lr=0.3 (now 3;", 0),
                0u)
          << s.remedies.front().text;
    }
  EXPECT_TRUE(spikes) << d.verdict();
  EXPECT_FALSE(d.healthy());
  EXPECT_NE(d.verdict().find("problem"), std::string::npos) << d.verdict();
  EXPECT_NE(d.verdict().find(": diverged"), std::string::npos) << d.verdict();
  fs::remove_all(dir);
}

TEST(DoctorVerdict, ARunTrainedWithoutTheRuleIsJudgedByIt) {
  // The library's Trainer without hooks ends "done"; doctor applies the same rule to its records.
  const std::string dir = fresh_dir("norule");
  Config c = blow_up(60);
  c.train.log_interval = 1;
  Trainer(c, dir, false).run();
  const Diagnosis d = diagnose_run(dir);
  EXPECT_EQ(d.end_reason, "done");
  ASSERT_FALSE(d.findings.empty());
  EXPECT_EQ(d.findings.front().kind, "diverged") << d.verdict();
  EXPECT_EQ(d.findings.front().values["from_end_event"], false);
  EXPECT_NE(d.findings.front().evidence.front().find("trained without it"), std::string::npos);
  fs::remove_all(dir);
}

// A step line and an end event as a run writes them.
nlohmann::json step_line(long step, double loss) {
  StepRecord r;
  r.step = step;
  r.total_steps = 100;
  r.loss = loss;
  r.ce = loss;
  r.lr = 1e-3;
  return to_json(r);
}

TEST(DoctorVerdict, TheLearningRateComesFromTheSweepOfTheRunsVariant) {
  // A sweep over placement x lr: the diverged pre run at lr 0.3 is told the largest lr of the
  // pre runs that finished done (0.01), not the post runs' (0.1), nor its own diverged 0.1.
  const fs::path sweep = fresh_dir("sweep");
  fs::create_directories(sweep / "placement-pre_lr-0.3");
  nlohmann::json runs = nlohmann::json::array();
  auto run = [&](const std::string& placement, const std::string& lr, const std::string& status) {
    runs.push_back({{"name", "placement-" + placement + "_lr-" + lr},
                    {"dir", "placement-" + placement + "_lr-" + lr},
                    {"overrides", {{"model.placement", placement}, {"optim.lr", lr}}},
                    {"status", status}});
  };
  run("pre", "0.001", "done");
  run("pre", "0.01", "done");
  run("pre", "0.1", "diverged");
  run("pre", "0.3", "diverged");
  run("post", "0.1", "done");
  std::ofstream(sweep / "sweep.json") << nlohmann::json{{"lr_key", "optim.lr"}, {"runs", runs}};
  RunEnd e;
  e.step = 60;
  e.reason = "diverged";
  e.detail = "smoothed loss 9.0000 above the initial loss 5.5000 for 50 steps (to step 60)";
  std::vector<nlohmann::json> records = {step_line(1, 5.5), step_line(60, 9.0), to_json(e)};
  Config c;
  c.optim.lr = 0.3;
  const Diagnosis d = diagnose_records(records, c, true, std::nullopt,
                                       (sweep / "placement-pre_lr-0.3").string());
  ASSERT_FALSE(d.findings.empty());
  const DoctorFinding& f = d.findings.front();
  EXPECT_EQ(f.kind, "diverged");
  EXPECT_EQ(f.remedies.front().text.rfind(
                "lower optim.lr to 0.01 (--set optim.lr=0.01): the largest "
                                     "learning rate that did not diverge", 0),
            0u) << f.remedies.front().text;
  EXPECT_NE(f.remedies.front().text.find("placement-pre_lr-0.01"), std::string::npos);
  EXPECT_EQ(f.values["lr_source"], "sweep");
  EXPECT_DOUBLE_EQ(f.values["suggested_lr"].get<double>(), 0.01);
  // Outside the sweep (no run directory): a tenfold cut.
  const Diagnosis alone = diagnose_records(records, c, true, std::nullopt);
  EXPECT_EQ(alone.findings.front().remedies.front().text.rfind("lower optim.lr to 0.03", 0), 0u)
      << alone.findings.front().remedies.front().text;
  fs::remove_all(sweep);
}

TEST(DoctorVerdict, AnInterruptedRunIsJudgedOnTheStepsItReached) {
  Config c = test::tiny_run(150);
  c.train.threads = 1;
  c.train.log_interval = 5;
  for (const int stop_at : {55, 5}) {
    const std::string dir = fresh_dir("interrupted");
    int steps = 0;
    TrainHooks h;
    h.on_log = [&](const StepRecord& r) { steps = static_cast<int>(r.step); };
    h.stop_requested = [&] { return steps >= stop_at; };
    Trainer t(c, dir, false);
    const TrainResult res = t.run(with_divergence_rule(h, t, dir));
    ASSERT_EQ(res.stop_reason, "interrupted");
    const Diagnosis d = diagnose_run(dir);
    EXPECT_FALSE(d.finished());
    EXPECT_FALSE(d.healthy()) << d.verdict();  // never a clean bill
    const std::string v = d.verdict();
    EXPECT_EQ(v.find("healthy"), std::string::npos) << v;
    if (stop_at == 55)
      EXPECT_EQ(v.rfind("interrupted at step 55 of 150: judged on 55 steps", 0), 0u) << v;
    else
      EXPECT_EQ(v.rfind("interrupted at step 5 of 150: not judged (only 5 steps", 0), 0u) << v;
    EXPECT_EQ(to_json(d)["healthy"], false);
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace normlab
