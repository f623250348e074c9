// How a run ends: the trainer writes an end event on every way out of Trainer::run (done,
// interrupted, diverged by the guards, by a hook or by the end-of-run verdict), the step that
// stops a run is logged off the log interval, and the result's numbers mean what the README says
// (train loss over the last 20 updated steps, tokens/s as the run average).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/metrics.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

std::vector<nlohmann::json> step_lines(const std::string& dir) {
  std::vector<nlohmann::json> out;
  for (const auto& r : read_metrics(dir))
    if (!r.contains(metric::event)) out.push_back(r);
  return out;
}

int end_events(const std::string& dir) {
  int n = 0;
  for (const auto& r : read_metrics(dir)) n += r.value(metric::event, "") == "end";
  return n;
}

TEST(RunEnd, ADoneRunEndsWithItsNumbers) {
  Config c = test::tiny_run(30);
  c.train.eval_interval = 15;
  c.train.eval_batches = 1;
  const std::string dir = test::temp_dir("end_done");
  const TrainResult r = Trainer(c, dir, false).run();
  const auto m = read_metrics(dir);
  ASSERT_EQ(m.back().value(metric::event, ""), "end");
  const RunEnd e = run_end_from_json(m.back());
  EXPECT_EQ(e.reason, "done");
  EXPECT_EQ(e.detail, "");
  EXPECT_EQ(e.step, 30);
  // Train loss: the mean of the last 20 steps' losses (every step logged, none skipped).
  const auto steps = step_lines(dir);
  ASSERT_EQ(steps.size(), 30u);
  double sum = 0;
  for (std::size_t i = 10; i < 30; ++i) sum += steps[i][metric::loss].get<double>();
  EXPECT_EQ(e.train_loss_steps, 20);
  EXPECT_EQ(r.train_loss_steps, 20);
  EXPECT_NEAR(*e.train_loss, sum / 20, 1e-12);
  EXPECT_NEAR(r.train_loss, sum / 20, 1e-12);
  ASSERT_TRUE(e.val_loss && r.val_loss);
  EXPECT_EQ(*e.val_loss, steps.back()[metric::val_loss].get<double>());
  // tokens/s: the run average, tokens trained over the run's wall time.
  const double tokens = 30.0 * c.train.batch_size * c.model.seq_len;
  EXPECT_NEAR(r.tokens_per_s * r.wall_s, tokens, 1e-6 * tokens);
  EXPECT_EQ(*e.tokens_per_s, r.tokens_per_s);
  EXPECT_EQ(*e.wall_s, r.wall_s);
  EXPECT_EQ(run_end_of(m)->reason, "done");
  fs::remove_all(dir);
}

TEST(RunEnd, ATrainLossOfFewerStepsWhenTheRunHasFewer) {
  const std::string dir = test::temp_dir("end_short");
  const TrainResult r = Trainer(test::tiny_run(6), dir, false).run();
  EXPECT_EQ(r.train_loss_steps, 6);
  double sum = 0;
  for (const auto& s : step_lines(dir)) sum += s[metric::loss].get<double>();
  EXPECT_NEAR(r.train_loss, sum / 6, 1e-12);
  fs::remove_all(dir);
}

TEST(RunEnd, TheStepThatStopsARunIsLoggedThenTheEnd) {
  Config c = test::tiny_run(30);
  c.train.log_interval = 10;  // step 7 is not on the log interval
  const std::string dir = test::temp_dir("end_stop");
  TrainHooks h;
  h.check_divergence = [](const StepRecord& r) -> std::optional<std::string> {
    if (r.step == 7) return std::string("test stop");
    return std::nullopt;
  };
  const TrainResult r = Trainer(c, dir, false).run(h);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.stop_step, 7);
  EXPECT_EQ(r.steps, 7);
  const auto m = read_metrics(dir);
  ASSERT_GE(m.size(), 2u);
  EXPECT_EQ(m[m.size() - 2].value(metric::step, 0L), 7);  // the stopping step's record
  EXPECT_FALSE(m[m.size() - 2].contains(metric::event));
  const RunEnd e = run_end_from_json(m.back());
  EXPECT_EQ(e.reason, "diverged");
  EXPECT_EQ(e.detail, "test stop");
  EXPECT_EQ(e.step, 7);
  EXPECT_EQ(e.train_loss_steps, 7);
  fs::remove_all(dir);
}

TEST(RunEnd, GuardStopsEndAsDiverged) {
  // Every step non-finite from the 5th on: skipped until train.max_bad_steps (3) stops the run.
  Config c = test::tiny_run(30);
  c.train.log_interval = 100;
  c.train.max_bad_steps = 3;
  const std::string dir = test::temp_dir("end_guard");
  TrainHooks h;
  h.inject = [](long step, std::span<float>, double& loss) {
    if (step >= 4) loss = NAN;
  };
  const TrainResult r = Trainer(c, dir, false).run(h);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.stop_step, 7);
  const auto m = read_metrics(dir);
  const RunEnd e = run_end_from_json(m.back());
  EXPECT_EQ(e.reason, "diverged");
  EXPECT_EQ(e.step, 7);
  EXPECT_NE(e.detail.find("3 consecutive skipped steps"), std::string::npos) << e.detail;
  EXPECT_EQ(e.train_loss_steps, 4);  // the four updated steps
  fs::remove_all(dir);
}

TEST(RunEnd, TheEndOfRunVerdictIsWritten) {
  const std::string dir = test::temp_dir("end_judged");
  TrainHooks h;
  long judged = 0;
  h.judge_end = [&](const TrainResult& r) -> std::optional<std::string> {
    judged = r.steps;
    return std::string("judged");
  };
  const TrainResult r = Trainer(test::tiny_run(5), dir, false).run(h);
  EXPECT_EQ(judged, 5);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.stop_reason, "judged");
  const RunEnd e = *read_run_end(dir);
  EXPECT_EQ(e.reason, "diverged");
  EXPECT_EQ(e.detail, "judged");
  fs::remove_all(dir);
}

TEST(RunEnd, InterruptedThenResumedAndFinishedHasOneEnd) {
  Config c = test::tiny_run(12);
  const std::string dir = test::temp_dir("end_resume");
  {
    TrainHooks h;
    int seen = 0;
    h.on_log = [&](const StepRecord&) { ++seen; };
    h.stop_requested = [&] { return seen == 5; };
    const TrainResult r = Trainer(c, dir, false).run(h);
    EXPECT_EQ(r.stop_reason, "interrupted");
    const RunEnd e = *read_run_end(dir);
    EXPECT_EQ(e.reason, "interrupted");
    EXPECT_EQ(e.step, 5);
  }
  TrainResult done;
  {
    done = Trainer(c, dir, true).run();
    EXPECT_EQ(done.steps, 12);
    EXPECT_EQ(end_events(dir), 1);
    EXPECT_EQ(read_run_end(dir)->reason, "done");
    EXPECT_EQ(step_lines(dir).size(), 12u);
  }
  // Resuming a finished run trains nothing and answers with the run's own numbers.
  const TrainResult again = Trainer(c, dir, true).run();
  EXPECT_EQ(again.steps, 12);
  EXPECT_EQ(again.train_loss, done.train_loss);
  EXPECT_EQ(again.train_loss_steps, done.train_loss_steps);
  EXPECT_EQ(again.tokens_per_s, done.tokens_per_s);
  EXPECT_EQ(end_events(dir), 1);
  fs::remove_all(dir);
}

// A run stopped at train.stop_at (a confirm arm's window) has not ended: the end-of-run clause
// does not judge it; the same run trained to train.steps is judged.
TEST(RunEnd, ARunStoppedAtStopAtIsNotJudgedByTheEndClause) {
  Config c = test::tiny_run(20);
  c.train.stop_at = 10;
  const std::string dir = test::temp_dir("end_stop_at");
  long judged = 0;
  TrainHooks h;
  h.judge_end = [&](const TrainResult& r) -> std::optional<std::string> {
    judged = r.steps;
    return std::string("judged");
  };
  const TrainResult r = Trainer(c, dir, false).run(h);
  EXPECT_EQ(r.steps, 10);
  EXPECT_FALSE(r.diverged);
  EXPECT_EQ(judged, 0);
  EXPECT_NE(read_run_end(dir)->reason, "diverged");
  fs::remove_all(dir);
  c.train.stop_at = 0;  // the same run to train.steps
  const TrainResult done = Trainer(c, dir, false).run(h);
  EXPECT_EQ(judged, 20);
  EXPECT_TRUE(done.diverged);
  fs::remove_all(dir);
}

// The divergence rule's early stop of a resumed run: the rule's state is saved in the checkpoint,
// so the run stops at the step the straight run stopped at, whatever the log interval (it
// restarted on resume before, and the run stopped later).
TEST(RunEnd, AResumedRunStopsForDivergenceWhereTheStraightRunStops) {
  Config c = test::tiny_run(90);
  c.train.checkpoint_interval = 0;
  c.train.log_interval = 7;  // the records alone could not restore the smoothed loss
  const auto run = [&](const std::string& dir, bool resume, long interrupt_at) {
    TrainHooks base;
    auto done = std::make_shared<long>(0);  // steps taken by this process
    base.inject = [done](long step, std::span<float>, double& loss) {
      *done += 1;
      if (step >= 5) loss = 100;  // the loss blows up from the 6th step on
    };
    if (interrupt_at > 0)
      base.stop_requested = [done, interrupt_at] { return *done == interrupt_at; };
    Trainer t(c, dir, resume);
    return t.run(with_divergence_rule(base, t, dir));
  };
  const std::string straight = test::temp_dir("end_div_straight");
  const TrainResult a = run(straight, false, 0);
  ASSERT_TRUE(a.diverged);
  EXPECT_LT(a.stop_step, 90);
  const std::string dir = test::temp_dir("end_div_resumed");
  EXPECT_EQ(run(dir, false, 30).stop_reason, "interrupted");
  const TrainResult b = run(dir, true, 0);
  ASSERT_TRUE(b.diverged);
  EXPECT_EQ(b.stop_step, a.stop_step);
  EXPECT_EQ(b.stop_reason, a.stop_reason);
  fs::remove_all(straight);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
