// The metrics schema: every field a run writes is listed (and explained) in metric_fields(), a
// step record survives to_json / step_record_from_json, and non-finite values are written as null.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
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
  bool saw_diag = false, saw_event = false, saw_end = false;
  for (const auto& rec : read_metrics(dir.string())) {
    for (const auto& [k, v] : rec.items()) EXPECT_TRUE(keys.contains(k)) << "undocumented key " << k;
    saw_diag |= rec.contains(metric::attn_max_logit_head);
    saw_event |= rec.value(metric::event, "") == "rollback";
    saw_end |= rec.value(metric::event, "") == "end";
  }
  EXPECT_TRUE(saw_diag);
  EXPECT_TRUE(saw_event);
  EXPECT_TRUE(saw_end);
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

// Step lines as `normlab train` writes them: loss 10 - step, val loss every 5 steps.
std::vector<nlohmann::json> step_lines(long from, long to) {
  std::vector<nlohmann::json> m;
  for (long s = from; s <= to; ++s) {
    StepRecord r;
    r.step = s;
    r.loss = 10.0 - static_cast<double>(s);
    if (s % 5 == 0) r.val_loss = 20.0 - static_cast<double>(s);
    m.push_back(to_json(r));
  }
  return m;
}

TEST(Metrics, RunEndRoundTripsAndTheLastEndEventWins) {
  RunEnd e;
  e.step = 7;
  e.reason = "diverged";
  e.detail = "why";
  e.train_loss = 2.5;
  e.train_loss_steps = 7;
  e.val_loss = 3.5;
  e.tokens_per_s = 1000;
  e.wall_s = 1.5;
  const nlohmann::json j = to_json(e);
  EXPECT_EQ(j.at(metric::event), "end");
  const RunEnd back = run_end_from_json(j);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.reason, "diverged");
  EXPECT_EQ(back.detail, "why");
  EXPECT_EQ(back.train_loss, 2.5);
  EXPECT_EQ(back.train_loss_steps, 7);
  EXPECT_EQ(back.val_loss, 3.5);
  EXPECT_EQ(back.wall_s, 1.5);
  RunEnd none;  // no train loss, no val loss: nulls, read back as nothing
  none.train_loss = NAN;
  const nlohmann::json jn = to_json(none);
  EXPECT_TRUE(jn.at(metric::train_loss).is_null());
  EXPECT_FALSE(run_end_from_json(jn).train_loss);
  EXPECT_FALSE(run_end_from_json(jn).val_loss);

  auto m = step_lines(1, 7);
  m.push_back(j);
  RunEnd later = e;
  later.reason = "done";
  m.push_back(to_json(later));
  const auto got = run_end_of(m);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->from_event);
  EXPECT_EQ(got->reason, "done");
}

TEST(Metrics, RunEndFallsBackToTheStepLines) {
  // No end event (an older run): the last step, the mean loss of the logged steps among the last
  // 20, the last val loss.
  auto m = step_lines(1, 30);
  const auto e = run_end_of(m);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->from_event);
  EXPECT_EQ(e->reason, "");
  EXPECT_EQ(e->step, 30);
  EXPECT_EQ(e->train_loss_steps, 20);
  EXPECT_DOUBLE_EQ(*e->train_loss, 10.0 - (11 + 30) / 2.0);  // steps 11..30
  EXPECT_EQ(e->val_loss, 20.0 - 30);
  // Steps written after the last end event (a resumed process that never ended): the steps win.
  RunEnd old;
  old.step = 10;
  old.reason = "interrupted";
  auto resumed = step_lines(1, 10);
  resumed.push_back(to_json(old));
  for (const auto& r : step_lines(11, 12)) resumed.push_back(r);
  const auto r = run_end_of(resumed);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->from_event);
  EXPECT_EQ(r->step, 12);
  EXPECT_FALSE(run_end_of({}));
}

TEST(Metrics, EndEventsStayOutOfTheCsvAndAResumeDropsThem) {
  const fs::path dir = test::temp_dir("metrics_end");
  {
    MetricsWriter w(dir.string());
    for (const auto& r : step_lines(1, 4)) w.write(r);
    RunEnd e;
    e.step = 4;
    e.reason = "interrupted";
    w.write(to_json(e));
  }
  std::ifstream csv(dir / "metrics.csv");
  long rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  EXPECT_EQ(rows, 1 + 4);  // header and the steps
  ASSERT_EQ(read_metrics(dir.string()).size(), 5u);
  EXPECT_EQ(run_end_of(read_metrics(dir.string()))->reason, "interrupted");
  { MetricsWriter resumed(dir.string(), 4); }
  const auto m = read_metrics(dir.string());
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m.back().contains(metric::event));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
