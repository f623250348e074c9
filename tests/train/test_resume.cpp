// Resuming a run with changes: a finished run extended from 20 to 30 steps equals a straight
// 30-step run bitwise when the schedule does not depend on train.steps (and follows the new
// schedule when it does); a key that changes shapes or data is refused and the run left alone;
// resuming from an older checkpoint rewinds the run to it and replays it exactly; σReparam's
// power-iteration state resumes bitwise.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "normlab/trainer.h"
#include "train/schedule.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

using test::temp_dir;

std::string read_text(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The tiny run with a schedule that does not depend on train.steps (warmup, then constant).
Config constant_lr(int steps) {
  Config c = test::tiny_run(steps);
  c.optim.schedule = ScheduleKind::constant;
  return c;
}

struct Arenas {
  std::vector<float> params;
  std::vector<std::vector<float>> state;  // the optimizer's state arenas, in its order
};
Arenas arenas(const Trainer& t) {
  Arenas a{{t.params().begin(), t.params().end()}, {}};
  for (const auto& [name, s] : t.optimizer_state()) a.state.emplace_back(s.begin(), s.end());
  return a;
}
// The step records of metrics.jsonl (event lines left out).
std::vector<nlohmann::json> step_records(const std::string& dir) {
  std::vector<nlohmann::json> out;
  for (auto& j : read_metrics(dir))
    if (!j.contains("event")) out.push_back(std::move(j));
  return out;
}

void expect_bitwise_equal(const Arenas& a, const Arenas& b) {
  EXPECT_TRUE(a.params == b.params);
  ASSERT_EQ(a.state.size(), b.state.size());
  for (std::size_t k = 0; k < a.state.size(); ++k) EXPECT_TRUE(a.state[k] == b.state[k]) << k;
}

TEST(Resume, ExtendingAFinishedRunEqualsAStraightRun) {
  const std::string a = temp_dir("extend_straight"), b = temp_dir("extend_resumed");
  Arenas straight;
  {
    Trainer t(constant_lr(30), a, false);
    t.run();
    straight = arenas(t);
  }
  {
    Trainer t(constant_lr(20), b, false);
    EXPECT_EQ(t.run().steps, 20);
  }
  {
    ResumeOptions from;
    from.config = resume_config(resume_point(b), {"train.steps=30"});
    Trainer t(Config{}, b, true, from);
    EXPECT_EQ(t.step(), 20);
    EXPECT_EQ(t.config().train.steps, 30);
    EXPECT_EQ(t.run().steps, 30);
    expect_bitwise_equal(arenas(t), straight);
  }
  // The new config is the run's: config.toml holds it and a further resume uses it.
  EXPECT_NE(read_text(fs::path(b) / "config.toml").find("steps = 30"), std::string::npos);
  {
    Trainer t(Config{}, b, true);
    EXPECT_EQ(t.config().train.steps, 30);
    EXPECT_EQ(t.step(), 30);
  }
  // The metrics read as one 30-step run.
  const auto ma = step_records(a), mb = step_records(b);
  ASSERT_EQ(ma.size(), mb.size());
  for (std::size_t i = 0; i < ma.size(); ++i) EXPECT_EQ(ma[i]["loss"], mb[i]["loss"]) << i;
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Resume, AStepDependentScheduleFollowsTheNewLength) {
  const std::string dir = temp_dir("extend_cosine");
  Config c = test::tiny_run(20);
  c.optim.schedule = ScheduleKind::cosine;
  {
    Trainer t(c, dir, false);
    t.run();
  }
  ResumeOptions from;
  from.config = resume_config(resume_point(dir), {"train.steps=30"});
  Trainer t(Config{}, dir, true, from);
  std::vector<double> lr;
  TrainHooks h;
  h.on_log = [&](const StepRecord& r) { lr.push_back(r.lr); };
  t.run(h);
  ASSERT_EQ(lr.size(), 10u);
  EXPECT_EQ(lr[0], learning_rate(from.config->optim, 20, 30));
  EXPECT_NE(lr[0], learning_rate(c.optim, 19, 20));
  fs::remove_all(dir);
}

TEST(Resume, AKeyThatChangesShapesOrDataIsRefusedAndTheRunLeftAlone) {
  const std::string dir = temp_dir("refuse");
  {
    Trainer t(constant_lr(5), dir, false);
    t.run();
  }
  const std::string toml = read_text(fs::path(dir) / "config.toml");
  try {
    resume_config(resume_point(dir), {"train.steps=10", "train.batch_size=8"});
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems.size(), 1u) << e.what();
    EXPECT_NE(e.problems[0].find("train.batch_size cannot change on resume: it changes"),
              std::string::npos)
        << e.what();
  }
  // The trainer checks a config it is given the same way.
  ResumeOptions from;
  from.config = constant_lr(10);
  from.config->model.d_model = 64;
  EXPECT_THROW(Trainer(Config{}, dir, true, from), ConfigError);
  // Fewer steps than the checkpoint's.
  from.config = constant_lr(3);
  EXPECT_THROW(Trainer(Config{}, dir, true, from), ConfigError);
  EXPECT_EQ(read_text(fs::path(dir) / "config.toml"), toml);
  EXPECT_EQ(fs::path(latest_checkpoint(dir)).filename(), "step_00000005");
  fs::remove_all(dir);
}

TEST(Resume, FromAnOlderCheckpointRewindsTheRun) {
  const std::string dir = temp_dir("rewind");
  Config c = constant_lr(30);
  c.train.checkpoint_interval = 10;
  c.train.keep_checkpoints = 5;
  Arenas first;
  {
    Trainer t(c, dir, false);
    t.run();
    first = arenas(t);
  }
  const fs::path ckpts = fs::path(dir) / "checkpoints";
  ASSERT_TRUE(fs::exists(ckpts / "step_00000020"));
  const ResumePoint p = resume_point((ckpts / "step_00000010").string());
  EXPECT_TRUE(fs::equivalent(p.run_dir, dir));
  ResumeOptions from;
  from.checkpoint = p.checkpoint;
  from.rewind = true;  // without it, refused (tests/train/test_checkpoint_damage.cpp)
  Trainer t(Config{}, p.run_dir, true, from);
  EXPECT_EQ(t.step(), 10);
  // Rewound: latest names step 10, the later checkpoints and metrics records are gone.
  EXPECT_EQ(fs::path(latest_checkpoint(dir)).filename(), "step_00000010");
  EXPECT_FALSE(fs::exists(ckpts / "step_00000020"));
  EXPECT_FALSE(fs::exists(ckpts / "step_00000030"));
  auto m = step_records(dir);
  ASSERT_FALSE(m.empty());
  EXPECT_EQ(m.back()["step"], 10);
  // Training on replays the first run exactly.
  t.run();
  expect_bitwise_equal(arenas(t), first);
  m = step_records(dir);
  ASSERT_EQ(m.size(), 30u);
  for (std::size_t i = 0; i < m.size(); ++i) EXPECT_EQ(m[i]["step"], static_cast<long>(i) + 1);
  // A checkpoint folder outside a run's checkpoints/ is not a resume point.
  const fs::path loose = fs::path(dir) / "elsewhere" / "step_00000010";
  fs::create_directories(loose.parent_path());
  fs::copy(ckpts / "step_00000010", loose);
  EXPECT_THROW(resume_point(loose.string()), FormatError);
  fs::remove_all(dir);
}

// σReparam's power-iteration vectors u, v are model state outside the optimizer: the checkpoint
// holds them (model.safetensors, by name) and a resumed run continues bitwise as the straight one,
// with micro-batches (one power step per step) and diagnostics (sigma_w) on.
TEST(Resume, SigmaReparamStateResumesBitwise) {
  const std::string a = temp_dir("sigma_straight"), b = temp_dir("sigma_resumed");
  auto cfg = [](int steps) {
    Config c = constant_lr(steps);
    c.model.sigma_reparam = true;
    c.train.grad_accum = 2;
    c.diag.interval = 3;
    return c;
  };
  Arenas straight;
  {
    Trainer t(cfg(16), a, false);
    t.run();
    straight = arenas(t);
  }
  {
    Trainer t(cfg(8), b, false);
    EXPECT_EQ(t.run().steps, 8);
  }
  const auto file =
      SafetensorsFile::open((fs::path(latest_checkpoint(b)) / "model.safetensors").string());
  EXPECT_NE(file.find("blocks.1.mlp.w_out.sigma_u"), nullptr);
  EXPECT_NE(file.find("blocks.0.attn.wqkv.sigma_v"), nullptr);
  EXPECT_NE(file.find("blocks.0.attn.wqkv.sigma_gamma"), nullptr);
  {
    ResumeOptions from;
    from.config = resume_config(resume_point(b), {"train.steps=16"});
    Trainer t(Config{}, b, true, from);
    EXPECT_EQ(t.run().steps, 16);
    expect_bitwise_equal(arenas(t), straight);
  }
  const auto ma = step_records(a), mb = step_records(b);
  ASSERT_EQ(ma.size(), mb.size());
  bool saw_sigma = false;
  for (std::size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["loss"], mb[i]["loss"]) << i;
    if (ma[i].contains("sigma_w")) {
      saw_sigma = true;
      EXPECT_EQ(ma[i]["sigma_w"], mb[i]["sigma_w"]) << i;
      EXPECT_EQ(ma[i]["sigma_w"]["blocks.0.attn.wqkv"].size(), 3u);
    }
  }
  EXPECT_TRUE(saw_sigma);
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace
}  // namespace normlab
