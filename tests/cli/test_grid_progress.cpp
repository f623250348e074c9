// The progress of a grid of runs (compare, sweep) on a pipe or file: each run's logged steps as
// "[NAME] step S/T | loss ... | ETA ..." lines, and when a run ends the grid's line, whose ETA is
// the steps left to all runs at the rate the grid has trained so far.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "cli/status.h"

namespace normlab::cli {
namespace {

bool grid_has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

StepRecord grid_record(long step, long total, double elapsed_s) {
  StepRecord r;
  r.step = step;
  r.total_steps = total;
  r.loss = 2.5;
  r.lr = 1e-3;
  r.grad_norm = 0.5;
  r.elapsed_s = elapsed_s;
  return r;
}

// Everything written to a temporary file (not a terminal: plain lines, nothing redrawn).
std::string written_to(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[512];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  return s;
}

TEST(GridProgress, PrintsEachRunsStepsAndTheGridWhenARunEnds) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  double now = 100;
  GridProgress g(f, 3, [&] { return now; });
  ASSERT_FALSE(g.terminal());
  g.plan(0, "post", 0, 40);
  g.plan(1, "pre", 10, 40);         // resumed at step 10: 30 steps to train
  g.plan(2, "peri", 0, 40, true);   // already finished: done from the start
  EXPECT_EQ(g.grid_text(), "grid: 1/3 runs done | elapsed 0m00s | ETA ?");
  now = 110;
  g.update(0, grid_record(20, 40, 10));  // 20 steps in 10 s
  now = 120;
  g.update(0, grid_record(40, 40, 20));
  g.end(0);
  const std::string out = written_to(f);
  EXPECT_TRUE(grid_has(out, "[post] step     20/40 | loss 2.5000")) << out;
  EXPECT_TRUE(grid_has(out, "ETA 0m10s")) << out;  // the run's own: 20 steps left at 0.5 s each
  // 40 steps trained in 20 s; 30 left (pre's, from its checkpoint at step 10): 15 s.
  EXPECT_TRUE(grid_has(out, "\ngrid: 2/3 runs done | elapsed 0m20s | ETA 0m15s\n")) << out;
  // A resumed run's ETA counts from its checkpoint's step.
  now = 130;
  g.update(1, grid_record(20, 40, 10));
  EXPECT_TRUE(grid_has(written_to(f), "[pre] step     20/40 | loss 2.5000 | lr 1.00e-03 | grad 0.500 |"))
      << written_to(f);
  EXPECT_TRUE(grid_has(written_to(f), "ETA 0m20s")) << written_to(f);
  // An interrupted run ends without being done; the grid then has nothing left to estimate.
  g.end(1, false);
  EXPECT_TRUE(grid_has(written_to(f), "\ngrid: 2/3 runs done | elapsed 0m30s\n")) << written_to(f);
  g.note("[pre] interrupted");
  EXPECT_TRUE(written_to(f).ends_with("[pre] interrupted\n")) << written_to(f);
  std::fclose(f);
}

}  // namespace
}  // namespace normlab::cli
