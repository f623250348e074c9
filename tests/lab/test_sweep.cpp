// Sweep grid parsing, the Wortsman et al. learning-rate sensitivity on hand-made runs, and sweep
// points trained end to end and judged by the divergence rule (lab/divergence.h).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fixtures.h"
#include "io/metrics.h"
#include "lab/sweep.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

TEST(Sweep, ParsesListsAndRanges) {
  auto a = parse_grid_axis("model.placement=post,pre,peri");
  EXPECT_EQ(a.key, "model.placement");
  EXPECT_EQ(a.values, (std::vector<std::string>{"post", "pre", "peri"}));
  auto b = parse_grid_axis("optim.lr=1e-4:1e-1:7log");
  ASSERT_EQ(b.values.size(), 7u);
  EXPECT_DOUBLE_EQ(std::stod(b.values.front()), 1e-4);
  EXPECT_DOUBLE_EQ(std::stod(b.values.back()), 1e-1);
  EXPECT_NEAR(std::stod(b.values[1]) / std::stod(b.values[0]), std::pow(10.0, 0.5), 1e-4);
  auto c = parse_grid_axis("optim.warmup_steps=0:100:3lin");
  EXPECT_EQ(c.values, (std::vector<std::string>{"0", "50", "100"}));
  for (const char* bad : {"model.placement", "=1,2", "optim.lr=", "optim.lr=1:2", "optim.lr=0:1:3log",
                          "optim.lr=1:2:3cubic", "model.placement=post,,pre"})
    EXPECT_THROW(parse_grid_axis(bad), ConfigError) << bad;
}

TEST(Sweep, ExpandsTheProductWithReadableNames) {
  const auto pts = expand_grid({parse_grid_axis("model.placement=post,pre"), parse_grid_axis("optim.lr=0.001,0.01")});
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].name, "placement-post_lr-0.001");
  EXPECT_EQ(pts[3].name, "placement-pre_lr-0.01");
}

SweepRun run(const std::string& placement, const std::string& lr, const std::string& status,
             double init, std::optional<double> fin) {
  SweepRun r;
  r.point.overrides = {{"model.placement", placement}, {"optim.lr", lr}};
  r.status = status;
  r.initial_loss = init;
  r.final_loss = fin;
  return r;
}

TEST(Sweep, LearningRateSensitivity) {
  // pre: losses 3.0, 2.5, 2.7 -> best 2.5, sensitivity mean(0.5, 0, 0.2) = 0.2333
  // post: 3.0, 2.6, diverged (counts as its initial loss 5.5) -> best 2.6,
  //       sensitivity mean(0.4, 0, 2.9) = 1.1
  const std::vector<SweepRun> runs = {
      run("pre", "0.001", "done", 5.5, 3.0), run("pre", "0.01", "done", 5.5, 2.5),
      run("pre", "0.1", "done", 5.5, 2.7),   run("post", "0.001", "done", 5.5, 3.0),
      run("post", "0.01", "done", 5.5, 2.6), run("post", "0.1", "diverged", 5.5, std::nullopt)};
  const auto s = lr_sensitivity(runs, "optim.lr");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].label, "model.placement=pre");
  EXPECT_NEAR(s[0].sensitivity, (0.5 + 0.0 + 0.2) / 3, 1e-12);
  EXPECT_NEAR(s[0].best_loss, 2.5, 1e-12);
  EXPECT_NEAR(s[0].best_lr, 0.01, 1e-12);
  EXPECT_NEAR(s[1].sensitivity, (0.4 + 0.0 + 2.9) / 3, 1e-12);
  EXPECT_EQ(s[1].diverged, 1);
  EXPECT_EQ(s[0].variant.size(), 1u);  // no internal bookkeeping leaks out
}

nlohmann::json status_of(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "sweep_status.json");
  return nlohmann::json::parse(in);
}

TEST(SweepPoint, ARecoveringSpikeFinishesDone) {
  // A loss spike at step 20, let through by the guards, far above the initial loss: the old rule
  // (a logged loss above the initial loss after step 10) stopped this run as diverged.
  Config c = test::tiny_run(120);
  c.train.spike_policy = SpikePolicy::off;
  const std::string dir = test::temp_dir("sweep_spike");
  TrainHooks h;
  h.inject = [](long step, std::span<float>, double& loss) {
    if (step == 19) loss = 40.0;
  };
  EXPECT_EQ(run_sweep_point(c, dir, h), "done");
  const auto m = read_metrics(dir);
  const double initial = m.front()[metric::loss].get<double>();
  EXPECT_GT(m[19][metric::loss].get<double>(), initial);  // the spike is there, at step 20
  EXPECT_EQ(m[19][metric::step], 20);
  const SweepRun r = read_sweep_run(dir, {});
  EXPECT_EQ(r.status, "done") << r.message;
  EXPECT_EQ(r.steps, 120);
  ASSERT_TRUE(r.final_loss && r.train_loss);
  EXPECT_EQ(*r.final_loss, *r.train_loss);  // no evaluation: judged by the train loss
  EXPECT_LT(*r.final_loss, initial);
  std::filesystem::remove_all(dir);
}

TEST(SweepPoint, ABlowUpIsDivergedWithReasonAndStep) {
  Config c = test::tiny_run(300);
  c.optim.lr = 300;
  c.train.log_interval = 50;
  const std::string dir = test::temp_dir("sweep_blowup");
  EXPECT_EQ(run_sweep_point(c, dir, {}), "diverged");
  const auto st = status_of(dir);
  EXPECT_EQ(st["status"], "diverged");
  const long stop = st["stop_step"].get<long>();
  EXPECT_GT(stop, 1);
  EXPECT_LT(stop, 300);  // stopped early
  EXPECT_FALSE(st["message"].get<std::string>().empty());
  // The stopping step's record, then the end event naming the reason and the step.
  const auto m = read_metrics(dir);
  ASSERT_GE(m.size(), 2u);
  const RunEnd e = run_end_from_json(m.back());
  EXPECT_EQ(e.reason, "diverged");
  EXPECT_EQ(e.step, stop);
  EXPECT_EQ(e.detail, st["message"].get<std::string>());
  EXPECT_EQ(m[m.size() - 2].value(metric::step, 0L), stop);
  const SweepRun r = read_sweep_run(dir, {});
  EXPECT_EQ(r.status, "diverged");
  EXPECT_EQ(r.steps, stop);
  EXPECT_FALSE(r.final_loss);  // counts with its initial loss in the sensitivity
  std::filesystem::remove_all(dir);
}

TEST(SweepPoint, ARunEndingAboveItsInitialLossIsDiverged) {
  // The last 15 steps' losses sit 20 nats up: too short for the early stop (50 steps), but the
  // final train loss is above the initial loss.
  Config c = test::tiny_run(60);
  c.train.spike_policy = SpikePolicy::off;
  c.train.log_interval = 10;
  const std::string dir = test::temp_dir("sweep_endhigh");
  TrainHooks h;
  h.inject = [](long step, std::span<float>, double& loss) {
    if (step >= 45) loss += 20;
  };
  EXPECT_EQ(run_sweep_point(c, dir, h), "diverged");
  const auto st = status_of(dir);
  EXPECT_EQ(st["stop_step"], 60);
  EXPECT_NE(st["message"].get<std::string>().find("final train loss"), std::string::npos)
      << st["message"];
  EXPECT_EQ(read_run_end(dir)->reason, "diverged");
  std::filesystem::remove_all(dir);
}

TEST(SweepPoint, AnInterruptedPointIsUnfinishedUntilItsRerun) {
  const Config c = test::tiny_run(20);
  const std::string dir = test::temp_dir("sweep_interrupt");
  TrainHooks h;
  int seen = 0;
  h.on_log = [&](const StepRecord&) { ++seen; };
  h.stop_requested = [&] { return seen == 8; };
  EXPECT_EQ(run_sweep_point(c, dir, h), "interrupted");
  EXPECT_FALSE(sweep_point_finished(dir));
  SweepRun r = read_sweep_run(dir, {});
  EXPECT_EQ(r.status, "interrupted");
  EXPECT_TRUE(sweep_status_unfinished(r.status));
  EXPECT_EQ(r.steps, 8);
  EXPECT_FALSE(r.final_loss);
  EXPECT_EQ(read_sweep_run(test::temp_dir("sweep_never"), {}).status, "not started");
  EXPECT_EQ(run_sweep_point(c, dir, {}), "done");
  r = read_sweep_run(dir, {});
  EXPECT_EQ(r.status, "done");
  EXPECT_EQ(r.steps, 20);
  EXPECT_TRUE(sweep_point_finished(dir));
  std::filesystem::remove_all(dir);
}

TEST(Sweep, TablesSayWhichLossTheyUse) {
  const std::vector<SweepRun> runs = {run("pre", "0.001", "done", 5.5, 3.0),
                                      run("pre", "0.01", "diverged", 5.5, std::nullopt)};
  const std::string t = sensitivity_table(lr_sensitivity(runs, "optim.lr"));
  EXPECT_NE(t.find("LR sensitivity (final val loss)"), std::string::npos) << t;
  EXPECT_NE(t.find("best final val loss"), std::string::npos) << t;
  const std::string rt = runs_table(runs);
  EXPECT_NE(rt.find("train loss (last 20 steps)"), std::string::npos) << rt;
  EXPECT_NE(rt.find("diverged"), std::string::npos) << rt;
  // A variant without any finished run prints no nan/inf.
  const std::string none = sensitivity_table(
      lr_sensitivity({run("pre", "0.01", "diverged", 5.5, std::nullopt)}, "optim.lr"));
  EXPECT_EQ(none.find("nan"), std::string::npos) << none;
  EXPECT_EQ(none.find("inf"), std::string::npos) << none;
}

// `sweep --command`: the command line of a point and the verdict on the run an external trainer
// wrote (what normlab.torch.Probe writes: step lines, an end event, config.toml).
TEST(SweepCommand, SubstitutesQuotedValuesAndRefusesUnknownNames) {
  SweepPoint p;
  p.overrides = {{"optim.lr", "0.01"}, {"data.path", "it's here"}};
  p.seed = 2;
  EXPECT_EQ(external_command("t --lr {optim.lr} --out {out} --seed {seed} --d {data.path}", p, "r/a b"),
            "t --lr '0.01' --out 'r/a b' --seed '2' --d 'it'\\''s here'");
  try {
    external_command("t --lr {lr}", p, "r");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("{lr} is neither a grid key nor {out} or {seed}"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("{optim.lr}"), std::string::npos) << e.what();
  }
}

void write_external_run(const std::string& dir, const std::vector<double>& losses,
                        const std::string& end_reason) {
  std::filesystem::create_directories(dir);
  std::ofstream m(std::filesystem::path(dir) / "metrics.jsonl");
  for (std::size_t i = 0; i < losses.size(); ++i)
    m << nlohmann::json{{"step", i + 1}, {"loss", losses[i]}, {"grad_norm", 1.0}}.dump() << "\n";
  if (!end_reason.empty()) {
    double sum = 0;
    const std::size_t n = std::min<std::size_t>(20, losses.size());
    for (std::size_t i = losses.size() - n; i < losses.size(); ++i) sum += losses[i];
    m << nlohmann::json{{"event", "end"}, {"step", losses.size()}, {"reason", end_reason},
                        {"detail", ""}, {"train_loss", sum / n}, {"train_loss_steps", n}}
             .dump()
      << "\n";
  }
}

TEST(SweepCommand, JudgesTheExternalRunAsDoctorDoes) {
  const std::string dir = test::temp_dir("sweep_command");
  std::vector<double> learns, blows;
  for (int s = 0; s < 60; ++s) {
    learns.push_back(4.0 - 0.02 * s);
    blows.push_back(4.0 + 0.5 * s);
  }
  write_external_run(dir + "/learns", learns, "done");
  EXPECT_EQ(judge_external_point(dir + "/learns", 0, ""), "done");
  EXPECT_TRUE(sweep_point_finished(dir + "/learns"));
  EXPECT_EQ(read_sweep_run(dir + "/learns", {}).status, "done");

  write_external_run(dir + "/blows", blows, "done");
  EXPECT_EQ(judge_external_point(dir + "/blows", 0, ""), "diverged");
  const SweepRun b = read_sweep_run(dir + "/blows", {});
  EXPECT_EQ(b.status, "diverged");
  EXPECT_NE(b.message.find("initial loss"), std::string::npos) << b.message;

  write_external_run(dir + "/cut", learns, "interrupted");
  EXPECT_EQ(judge_external_point(dir + "/cut", 0, ""), "interrupted");
  EXPECT_FALSE(std::filesystem::exists(dir + "/cut/sweep_status.json"));  // a rerun retries it

  write_external_run(dir + "/noend", learns, "");
  EXPECT_EQ(judge_external_point(dir + "/noend", 0, ""), "failed");
  EXPECT_NE(read_sweep_run(dir + "/noend", {}).message.find("no end event"), std::string::npos);
  EXPECT_FALSE(sweep_point_finished(dir + "/noend"));

  write_external_run(dir + "/exit", learns, "done");
  EXPECT_EQ(judge_external_point(dir + "/exit", 3, "the command exited with status 3"), "failed");
  EXPECT_EQ(read_sweep_run(dir + "/exit", {}).message, "the command exited with status 3");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace normlab
