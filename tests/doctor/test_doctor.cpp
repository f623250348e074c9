// `normlab doctor` on real runs made to fail in each way it knows (tiny models, tens of steps):
// each is diagnosed with the right cause, a healthy run with no false alarm, and a run without
// diagnostics says what it could not check. Also the errors for a missing or damaged run dir.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "doctor/doctor.h"
#include "doctor/doctor_fixtures.h"
#include "fixtures.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

// The tiny model of the failure runs: 2 layers, d_model 32, byte tokens of the embedded corpus.
Config tiny(int steps, double lr, int warmup) {
  Config c = test::tiny_run(steps);
  c.train.eval_batches = 1;
  c.train.checkpoint_interval = 1000;
  c.train.threads = 1;
  c.optim.lr = lr;
  c.optim.warmup_steps = warmup;
  c.diag.interval = 5;
  c.diag.per_head = true;
  return c;
}

std::string temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("normlab_doctor_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

Diagnosis train_and_diagnose(const Config& c, const std::string& name, const TrainHooks& h = {}) {
  const std::string dir = temp_dir(name);
  Trainer(c, dir, false).run(h);
  Diagnosis d = diagnose_run(dir);
  fs::remove_all(dir);
  return d;
}

using doctor_test::any_contains;
using doctor_test::find;

TEST(Doctor, HighLearningRateWithoutQKNormIsAttentionLogitGrowth) {
  // Pre-Norm at lr 0.3: the largest attention logit reaches the thousands within 25 steps.
  const Diagnosis d = train_and_diagnose(tiny(30, 0.3, 10), "attn");
  const DoctorFinding* f = find(d, "attention_logit_growth");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_EQ(f->severity, "problem");
  EXPECT_GE(f->values["max_attn_logit"].get<double>(), DoctorThresholds::kAttnLogit);
  EXPECT_TRUE(f->values["head"].is_number());  // diag.per_head names the head
  EXPECT_TRUE(any_contains(f->remedies, "model.qk_norm=rmsnorm"));
  EXPECT_FALSE(d.healthy());

  // The same run with QK-Norm: no attention-logit growth.
  Config q = tiny(30, 0.3, 10);
  q.model.qk_norm = QKNormKind::rmsnorm;
  const Diagnosis dq = train_and_diagnose(q, "attn_qk");
  EXPECT_EQ(find(dq, "attention_logit_growth"), nullptr) << dq.verdict();
}

TEST(Doctor, NoWeightDecayNoZLossHighLearningRateIsOutputLogitDivergence) {
  Config c = tiny(60, 1.0, 10);
  c.optim.weight_decay = 0;
  const Diagnosis d = train_and_diagnose(c, "logz");
  const DoctorFinding* f = find(d, "output_logit_divergence");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_GE(f->values["log_z_drift"].get<double>(), DoctorThresholds::kLogZDrift);
  EXPECT_TRUE(any_contains(f->remedies, "train.z_loss=1e-4"));
  EXPECT_TRUE(any_contains(f->remedies, "weight decay is off"));
}

TEST(Doctor, DeepPostNormWithoutWarmupIsLossSpikes) {
  Config c = tiny(20, 0.1, 0);
  c.model.placement = Placement::post;
  c.model.n_layer = 12;
  const Diagnosis d = train_and_diagnose(c, "post");
  const DoctorFinding* f = find(d, "loss_spikes");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_EQ(f->severity, "problem");
  EXPECT_GE(f->values["spikes"].size(), 1u);
  EXPECT_TRUE(any_contains(f->remedies, "warmup"));
  EXPECT_TRUE(any_contains(f->remedies, "Pre-Norm or Peri-Norm"));
}

TEST(Doctor, ForcedNonFiniteStepsAreCounted) {
  TrainHooks h;
  h.inject = [](long step, std::span<float> grads, double& loss) {
    if (step == 9 || step == 14) {
      loss = std::numeric_limits<double>::quiet_NaN();
      grads[0] = std::numeric_limits<float>::quiet_NaN();
    }
  };
  const Diagnosis d = train_and_diagnose(tiny(20, 3e-3, 5), "nan", h);
  const DoctorFinding* f = find(d, "nonfinite_steps");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_EQ(f->values["nonfinite_steps"], nlohmann::json({10, 15}));
  EXPECT_EQ(f->values["skipped_nonfinite"], 2);
  EXPECT_EQ(f->first_step, 10);
  EXPECT_EQ(f->last_step, 15);
}

TEST(Doctor, HealthyRunHasNoFalseAlarm) {
  // Peri-Norm with QK-Norm at lr 0.1 learns past the unigram plateau in 150 steps.
  Config c = tiny(150, 0.1, 10);
  c.model.placement = Placement::peri;
  c.model.qk_norm = QKNormKind::rmsnorm;
  c.train.log_interval = 5;
  const Diagnosis d = train_and_diagnose(c, "healthy");
  EXPECT_TRUE(d.healthy()) << d.verdict();
  for (const auto& f : d.findings) EXPECT_EQ(f.severity, "note") << f.title;
  ASSERT_TRUE(d.unigram_entropy);
  // The embedded corpus's byte entropy, as docs/findings.md states it (3.06 nats).
  EXPECT_NEAR(*d.unigram_entropy, 3.06, 0.01);
  ASSERT_TRUE(d.final_loss);
  EXPECT_LT(*d.final_loss, *d.unigram_entropy - DoctorThresholds::kPlateauBelow);
  EXPECT_TRUE(d.unchecked.empty());
  EXPECT_TRUE(d.not_checked.empty()) << d.not_checked.front().check;
  EXPECT_EQ(d.verdict().rfind("healthy", 0), 0u) << d.verdict();
}

TEST(Doctor, PostNormStallsAtTheUnigramPlateau) {
  Config c = tiny(150, 1e-2, 10);
  c.model.placement = Placement::post;
  c.train.log_interval = 5;
  const Diagnosis d = train_and_diagnose(c, "plateau");
  const DoctorFinding* f = find(d, "unigram_plateau");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_TRUE(any_contains(f->remedies, "finding 2 (\"Depth without warmup\")"));
  EXPECT_TRUE(
      any_contains(f->remedies, "finding 3 (\"Learning-rate sweep with and without warmup\")"));
}

TEST(Doctor, DiagnosticsOffListsWhatWasNotChecked) {
  Config c = tiny(10, 3e-3, 5);
  c.diag.interval = 0;
  const Diagnosis d = train_and_diagnose(c, "nodiag");
  EXPECT_EQ(d.diag_records, 0);
  std::vector<std::string> not_checked;
  for (const NotChecked& n : d.not_checked) {
    not_checked.push_back(n.check + ": " + n.reason);
    EXPECT_FALSE(n.evidence_lost) << n.check;  // never asked for, not lost
  }
  EXPECT_TRUE(any_contains(not_checked, "attention-logit growth: no record has attn_max_logit"));
  EXPECT_TRUE(any_contains(not_checked, "residual-stream growth: no record has resid_rms"));
  EXPECT_TRUE(any_contains(d.unchecked, "max_logit_raw"));
  EXPECT_NE(d.enable.find("diag.interval"), std::string::npos);
  EXPECT_EQ(find(d, "attention_logit_growth"), nullptr);
}

TEST(Doctor, MissingOrDamagedRunDirIsAClearError) {
  const std::string dir = temp_dir("bad");
  EXPECT_THROW(diagnose_run(dir), InputError);  // no such directory
  fs::create_directories(dir);
  try {
    diagnose_run(dir);
    FAIL() << "no metrics.jsonl was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("no metrics.jsonl"), std::string::npos) << e.what();
  }
  std::ofstream(fs::path(dir) / "metrics.jsonl")
      << "{\"step\":1,\"loss\":5.5}\nnot json\n{\"step\":2}\n";
  try {
    diagnose_run(dir);
    FAIL() << "a damaged metrics.jsonl was accepted";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  std::ofstream(fs::path(dir) / "metrics.jsonl") << "{\"event\":\"end\",\"step\":0}\n";
  EXPECT_THROW(diagnose_run(dir), FormatError);  // no step line
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
