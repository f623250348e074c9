// train.data_seed and train.stop_at, the two keys a replay arm of `doctor --confirm` trains with:
// data_seed = 0 replays a run bitwise from a checkpoint; another data_seed changes the batches
// from the resume step on and nothing before it, and keeps its own order across a further resume
// (mixed in once); stop_at ends a run early on the learning-rate schedule of train.steps, bitwise
// equal to the longer run's first steps.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

// loss and grad_norm of every step line, by step.
struct SeedCurve {
  std::vector<long> step;
  std::vector<double> loss, grad_norm;
};
SeedCurve seed_curve(const std::string& dir) {
  SeedCurve c;
  for (const auto& j : read_metrics(dir))
    if (!j.contains("event")) {
      c.step.push_back(j.at("step").get<long>());
      c.loss.push_back(j.at("loss").get<double>());
      c.grad_norm.push_back(j.at("grad_norm").get<double>());
    }
  return c;
}

Config seed_run_cfg() {
  Config c = test::tiny_run(24);
  c.train.checkpoint_interval = 8;
  c.train.keep_checkpoints = 5;
  c.optim.schedule = ScheduleKind::cosine;
  return c;
}

// Copies run `from` into `to` and resumes it from its step-8 checkpoint with `cfg`.
std::vector<float> seed_replay(const std::string& from, const std::string& to, const Config& cfg) {
  fs::remove_all(to);
  fs::copy(from, to, fs::copy_options::recursive);
  ResumeOptions r;
  r.checkpoint = (fs::path(to) / "checkpoints" / "step_00000008").string();
  r.config = cfg;
  r.rewind = true;
  Trainer t(cfg, to, true, r);
  t.run();
  return {t.params().begin(), t.params().end()};
}

TEST(DataSeed, ZeroReplaysBitwiseAndAnotherChangesOnlyTheStepsAfterTheResume) {
  const std::string orig = test::temp_dir("dataseed_orig"), same = test::temp_dir("dataseed_same"),
                    other = test::temp_dir("dataseed_other");
  std::vector<float> p_orig;
  {
    Trainer t(seed_run_cfg(), orig, false);
    t.run();
    p_orig.assign(t.params().begin(), t.params().end());
  }
  const SeedCurve a = seed_curve(orig);
  ASSERT_EQ(a.step.size(), 24u);

  EXPECT_TRUE(seed_replay(orig, same, seed_run_cfg()) == p_orig);
  const SeedCurve b = seed_curve(same);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grad_norm, b.grad_norm);

  Config c = seed_run_cfg();
  c.train.data_seed = 5;
  EXPECT_FALSE(seed_replay(orig, other, c) == p_orig);
  const SeedCurve d = seed_curve(other);
  ASSERT_EQ(d.step.size(), 24u);
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(a.loss[i], d.loss[i]) << "step " << a.step[i];
  // Step 9 trains the step-8 weights on another batch: its loss differs, and so do later ones.
  int differ = 0;
  for (std::size_t i = 8; i < 24; ++i) differ += a.loss[i] != d.loss[i];
  EXPECT_EQ(differ, 16);
  for (const auto& p : {orig, same, other}) fs::remove_all(p);
}

TEST(DataSeed, KeepsItsOrderAcrossAResumeAndStopAtFollowsTheLongSchedule) {
  const std::string orig = test::temp_dir("dataseed_base"),
                    straight = test::temp_dir("dataseed_straight"),
                    split = test::temp_dir("dataseed_split");
  {
    Trainer t(seed_run_cfg(), orig, false);
    t.run();
  }
  Config c = seed_run_cfg();
  c.train.data_seed = 7;
  const std::vector<float> p_straight = seed_replay(orig, straight, c);
  // The same arm stopped at step 16 (stop_at: the schedule still runs over 24 steps), then resumed
  // to the end with its own config: bitwise the straight arm (the seed was mixed in once).
  Config stop = c;
  stop.train.stop_at = 16;
  seed_replay(orig, split, stop);
  const SeedCurve half = seed_curve(split);
  ASSERT_EQ(half.step.back(), 16);
  const auto end = read_run_end(split);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->reason, "done");
  EXPECT_EQ(end->step, 16);
  std::vector<float> p_split;
  {
    ResumeOptions r;
    r.config = c;
    Trainer t(c, split, true, r);
    t.run();
    p_split.assign(t.params().begin(), t.params().end());
  }
  EXPECT_TRUE(p_split == p_straight);
  const SeedCurve s = seed_curve(straight), q = seed_curve(split);
  EXPECT_EQ(s.loss, q.loss);
  // A stop_at below the checkpoint's step is refused, naming the key.
  Config bad = c;
  bad.train.stop_at = 4;
  ResumeOptions r;
  r.config = bad;
  try {
    Trainer t(bad, split, true, r);
    ADD_FAILURE() << "stop_at below the checkpoint was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.stop_at = 4"), std::string::npos) << e.what();
  }
  for (const auto& p : {orig, straight, split}) fs::remove_all(p);
}

}  // namespace
}  // namespace normlab
