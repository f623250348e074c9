// The metrics schema: every field a run writes is listed (and explained) in metric_fields(), a
// step record survives to_json / step_record_from_json, and non-finite values are written as null.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <string>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/metrics.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

std::set<std::string> documented() {
  std::set<std::string> keys;
  for (const MetricField& f : metric_fields()) {
    EXPECT_FALSE(f.meaning.empty()) << f.key;
    EXPECT_TRUE(f.kind == "step" || f.kind == "diagnostic" || f.kind == "event") << f.key;
    EXPECT_TRUE(keys.insert(std::string(f.key)).second) << "listed twice: " << f.key;
  }
  return keys;
}

TEST(Metrics, EveryKeyARunWritesIsDocumented) {
  Config c = test::tiny_run(6);
  c.train.threads = 1;
  c.train.eval_interval = 3;
  c.train.eval_batches = 1;
  c.train.checkpoint_interval = 2;
  c.train.spike_policy = SpikePolicy::rollback;
  c.train.spike_window = 2;
  c.train.spike_threshold = 1.0;
  c.diag.interval = 2;
  c.diag.per_head = true;
  const fs::path dir = test::temp_dir("metrics");
  TrainHooks h;
  // A huge loss at the 4th step, once: a spike the rollback policy answers with an event record.
  bool injected = false;
  h.inject = [&](long step, std::span<float>, double& loss) {
    if (step == 3 && !injected) loss = 1e6, injected = true;
  };
  Trainer(c, dir.string(), false).run(h);
  const std::set<std::string> keys = documented();
  bool saw_diag = false, saw_event = false;
  for (const auto& rec : read_metrics(dir.string())) {
    for (const auto& [k, v] : rec.items()) EXPECT_TRUE(keys.contains(k)) << "undocumented key " << k;
    saw_diag |= rec.contains(metric::attn_max_logit_head);
    saw_event |= rec.contains(metric::event);
  }
  EXPECT_TRUE(saw_diag);
  EXPECT_TRUE(saw_event);
  fs::remove_all(dir);
}

TEST(Metrics, StepRecordRoundTrips) {
  StepRecord r;
  r.step = 7;
  r.tokens = 4096;
  r.loss = 2.5;
  r.ce = 2.25;
  r.z_loss = 0.25;
  r.lse_mean = 1.5;
  r.lr = 3e-4;
  r.grad_norm = std::nan("");
  r.tokens_per_s = 1234.5;
  r.val_loss = 2.75;
  r.skipped = true;
  r.nonfinite = true;
  r.skipped_total = 3;
  r.diag[metric::resid_rms] = {1.0, 2.0};
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j.at(metric::grad_norm).is_null());  // non-finite written as null
  const StepRecord b = step_record_from_json(j);
  EXPECT_EQ(b.step, 7);
  EXPECT_EQ(b.tokens, 4096);
  EXPECT_EQ(b.loss, 2.5);
  EXPECT_EQ(b.ce, 2.25);
  EXPECT_EQ(b.z_loss, 0.25);
  EXPECT_EQ(b.lse_mean, 1.5);
  EXPECT_EQ(b.lr, 3e-4);
  EXPECT_TRUE(std::isnan(b.grad_norm));
  EXPECT_EQ(b.tokens_per_s, 1234.5);
  ASSERT_TRUE(b.val_loss.has_value());
  EXPECT_EQ(*b.val_loss, 2.75);
  EXPECT_TRUE(b.skipped);
  EXPECT_FALSE(b.spike);
  EXPECT_TRUE(b.nonfinite);
  EXPECT_EQ(b.skipped_total, 3);
  EXPECT_FALSE(b.comm_ms_per_step.has_value());
  EXPECT_EQ(b.diag.at(metric::resid_rms), r.diag.at(metric::resid_rms));
  EXPECT_EQ(to_json(b), j);
}

}  // namespace
}  // namespace normlab
