// The training status line: the ETA measures the speed from the step this process started at (a
// resumed run's step, not step 0), and a step the guards skipped says why.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cli/status.h"

namespace normlab::cli {
namespace {

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

StepRecord record(long step) {
  StepRecord r;
  r.step = step;
  r.total_steps = 400;
  r.loss = 3.5;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  return r;
}

TEST(StatusLine, EtaCountsFromTheResumedStep) {
  // Resumed at step 100: 20 steps in 10 s, 280 to go at 0.5 s each.
  StepRecord r = record(120);
  r.elapsed_s = 10;
  const std::string s = status_text(r, 100);
  EXPECT_TRUE(has(s, "step    120/400")) << s;
  EXPECT_TRUE(has(s, "ETA 2m20s")) << s;
  // A fresh run: 120 steps in 60 s, 280 to go.
  r.elapsed_s = 60;
  EXPECT_TRUE(has(status_text(r, 0), "ETA 2m20s")) << status_text(r, 0);
  // No step done yet in this process: no estimate.
  r.step = 100;
  EXPECT_TRUE(has(status_text(r, 100), "ETA ?")) << status_text(r, 100);
}

TEST(StatusLine, SkippedStepsSayWhy) {
  StepRecord r = record(7);
  EXPECT_FALSE(has(status_text(r, 0), "SKIPPED")) << status_text(r, 0);
  EXPECT_FALSE(has(status_text(r, 0), "spike")) << status_text(r, 0);

  r.skipped = r.nonfinite = true;
  r.loss = std::nan("");
  EXPECT_TRUE(has(status_text(r, 0), "SKIPPED (non-finite loss)")) << status_text(r, 0);
  r.loss = 3.5;
  r.grad_norm = INFINITY;
  EXPECT_TRUE(has(status_text(r, 0), "SKIPPED (non-finite gradient)")) << status_text(r, 0);

  r = record(7);
  r.skipped = r.spike = true;
  const std::string spike = status_text(r, 0);
  EXPECT_TRUE(has(spike, "SKIPPED (spike)")) << spike;
  EXPECT_FALSE(has(spike, "non-finite")) << spike;

  r.rollback_unavailable = true;
  const std::string fallback = status_text(r, 0);
  EXPECT_TRUE(has(fallback, "SKIPPED (spike; no checkpoint to roll back to yet, skipped instead)"))
      << fallback;

  r = record(7);
  r.spike = true;  // spike_policy = off: flagged, updated
  const std::string through = status_text(r, 0);
  EXPECT_FALSE(has(through, "SKIPPED")) << through;
  EXPECT_TRUE(has(through, "spike (updated: train.spike_policy = off)")) << through;
}

}  // namespace
}  // namespace normlab::cli
