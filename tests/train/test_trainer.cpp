// The training loop end to end on the embedded corpus: the loss falls, a resumed run continues
// bitwise identically, a run directory is never overwritten, and evaluation is deterministic.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fixtures.h"
#include "io/metrics.h"
#include "model/generate.h"
#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/evaluate.h"
#include "normlab/safetensors.h"
#include "normlab/trainer.h"
#include "train/checkpoint.h"
#include "train/schedule.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

using test::temp_dir;

// The tiny run, Peri-LN with QK-norm and z-loss, evaluated and checkpointed every 10 steps.
Config tiny_config(int steps) {
  Config c = test::tiny_run(steps);
  c.model.placement = Placement::peri;
  c.model.qk_norm = QKNormKind::rmsnorm;
  c.train.eval_interval = 10;
  c.train.eval_batches = 2;
  c.train.checkpoint_interval = 10;
  c.train.z_loss = 1e-4;
  return c;
}

TEST(Trainer, LossFalls) {
  const std::string dir = temp_dir("loss");
  Trainer t(tiny_config(40), dir, false);
  std::vector<double> losses;
  TrainHooks h;
  h.on_log = [&](const StepRecord& r) { losses.push_back(r.loss); };
  const TrainResult r = t.run(h);
  ASSERT_EQ(r.steps, 40);
  ASSERT_EQ(losses.size(), 40u);
  EXPECT_GT(losses.front(), 5.0);  // ~ln(256) at init
  EXPECT_LT(r.train_loss, losses.front() - 1.5) << "first " << losses.front();
  EXPECT_FALSE(r.diverged);
  ASSERT_TRUE(r.val_loss.has_value());
  EXPECT_LT(*r.val_loss, 4.0);
  const auto metrics = read_metrics(dir);
  ASSERT_EQ(metrics.size(), 40u + 1);  // every step, then the end event
  EXPECT_EQ(metrics.back().value("event", ""), "end");
  for (const char* k : {"step", "tokens", "loss", "ce", "z_loss", "lr", "grad_norm", "tokens_per_s"})
    EXPECT_TRUE(metrics[39].contains(k)) << k;
  EXPECT_TRUE(metrics[9].contains("val_loss"));
  fs::remove_all(dir);
}

TEST(Trainer, ResumeIsBitwiseIdentical) {
  const std::string a = temp_dir("straight"), b = temp_dir("resumed");
  std::vector<double> la, lb;
  {
    Trainer t(tiny_config(20), a, false);
    TrainHooks h;
    h.on_log = [&](const StepRecord& r) { la.push_back(r.loss); };
    t.run(h);
  }
  {
    // Stop after step 10 (a checkpoint is written there), then resume in a new trainer.
    Trainer t(tiny_config(20), b, false);
    TrainHooks h;
    int seen = 0;
    h.on_log = [&](const StepRecord& r) { lb.push_back(r.loss), ++seen; };
    h.stop_requested = [&] { return seen == 10; };
    const TrainResult r = t.run(h);
    EXPECT_EQ(r.stop_reason, "interrupted");
    EXPECT_EQ(r.steps, 10);
  }
  {
    Trainer t(Config{}, b, true);
    EXPECT_EQ(t.step(), 10);
    TrainHooks h;
    h.on_log = [&](const StepRecord& r) { lb.push_back(r.loss); };
    t.run(h);
  }
  ASSERT_EQ(la.size(), lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) EXPECT_EQ(la[i], lb[i]) << "step " << i + 1;
  // Parameters and optimizer moments bitwise equal.
  const auto fa = SafetensorsFile::open(latest_checkpoint(a) + "/state.safetensors");
  const auto fb = SafetensorsFile::open(latest_checkpoint(b) + "/state.safetensors");
  const auto wa = SafetensorsFile::open(latest_checkpoint(a) + "/model.safetensors");
  const auto wb = SafetensorsFile::open(latest_checkpoint(b) + "/model.safetensors");
  for (const auto* pair : {&fa, &wa}) {
    const auto& other = pair == &fa ? fb : wb;
    ASSERT_EQ(pair->tensors().size(), other.tensors().size());
    for (const auto& t : pair->tensors()) {
      const auto* u = other.find(t.name);
      ASSERT_NE(u, nullptr) << t.name;
      const auto da = pair->data(t), db = other.data(*u);
      ASSERT_TRUE(std::equal(da.begin(), da.end(), db.begin(), db.end())) << t.name;
    }
  }
  // The resumed run's metrics read as one uninterrupted run.
  const auto ma = read_metrics(a), mb = read_metrics(b);
  ASSERT_EQ(ma.size(), mb.size());
  for (std::size_t i = 0; i < ma.size(); ++i)
    EXPECT_EQ(ma[i].value("loss", nlohmann::json()), mb[i].value("loss", nlohmann::json()));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, RefusesToOverwriteARun) {
  const std::string dir = temp_dir("overwrite");
  {
    Trainer t(tiny_config(2), dir, false);
    t.run();
  }
  const auto before = fs::last_write_time(latest_checkpoint(dir) + "/model.safetensors");
  EXPECT_THROW(Trainer(tiny_config(2), dir, false), InputError);
  EXPECT_EQ(before, fs::last_write_time(latest_checkpoint(dir) + "/model.safetensors"));
  fs::remove_all(dir);
}

TEST(Trainer, ResumeWithoutCheckpointFails) {
  const std::string dir = temp_dir("nockpt");
  fs::create_directories(dir);
  try {
    Trainer t(Config{}, dir, true);
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no complete checkpoint"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(Trainer, GenerationIsDeterministicWithASeed) {
  const std::string dir = temp_dir("gen");
  {
    Trainer t(tiny_config(10), dir, false);
    t.run();
  }
  const std::string ckpt = resolve_checkpoint(dir);
  const Config cfg = checkpoint_config(ckpt);
  Transformer<float> model(cfg.model, 1, cfg.model.seq_len);
  load_checkpoint(ckpt, model, nullptr, nullptr);
  SamplingOptions o;
  o.max_new_tokens = 12;
  o.temperature = 0.8;
  o.top_k = 20;
  o.top_p = 0.9;
  o.seed = 7;
  const std::vector<int> prompt = {'T', 'h', 'e', ' '};
  const auto a = generate(model, prompt, o, {});
  const auto b = generate(model, prompt, o, {});
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 12u);
  o.seed = 8;
  o.temperature = 5.0;
  o.top_k = 0;
  o.top_p = 1.0;
  const auto c = generate(model, prompt, o, {});
  EXPECT_NE(a, c);
  // A prompt as long as the context is refused.
  EXPECT_THROW(generate(model, std::vector<int>(cfg.model.seq_len, 'a'), o, {}), InputError);
  // Evaluation is deterministic.
  const EvalResult e1 = evaluate_checkpoint(dir, "", 2), e2 = evaluate_checkpoint(dir, "", 2);
  EXPECT_EQ(e1.loss, e2.loss);
  EXPECT_NEAR(e1.bits_per_byte, e1.loss / std::log(2.0), 1e-12);
  fs::remove_all(dir);
}

TEST(Schedule, WarmupThenCosineToFloor) {
  OptimConfig o;
  o.lr = 1.0;
  o.min_lr_ratio = 0.1;
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 14), 0.25);  // never zero at step 0
  EXPECT_DOUBLE_EQ(learning_rate(o, 3, 14), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 4, 14), 1.0);
  EXPECT_NEAR(learning_rate(o, 9, 14), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(o, 14, 14), 0.1, 1e-12);
  o.schedule = ScheduleKind::linear;
  EXPECT_NEAR(learning_rate(o, 9, 14), 0.55, 1e-12);
  o.schedule = ScheduleKind::constant;
  EXPECT_DOUBLE_EQ(learning_rate(o, 9, 14), 1.0);
  o.warmup_steps = 0;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0, 14), 1.0);
}

}  // namespace
}  // namespace normlab
