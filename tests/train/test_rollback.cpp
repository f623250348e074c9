// The rollback policy cannot loop forever: a spike that returns every time the run replays from
// its last checkpoint stops the run as diverged after train.max_bad_steps rollbacks to that
// checkpoint, even with good steps between them. (Before this, such a run alternated forever
// between a good step and a rollback, since the good step reset the count of bad steps.)
#include <gtest/gtest.h>

#include <filesystem>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/metrics.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

TEST(Rollback, ASpikeThatAlwaysReturnsStopsTheRun) {
  Config c = test::tiny_run(50);
  c.train.log_interval = 0;
  c.train.checkpoint_interval = 4;
  c.train.threads = 1;
  c.train.spike_policy = SpikePolicy::rollback;
  c.train.spike_window = 3;
  c.train.spike_threshold = 6.0;
  c.train.max_bad_steps = 4;
  const fs::path dir = test::temp_dir("rollback");
  TrainHooks h;
  long calls = 0;
  // Step 6 (0-based 5) always spikes; step 5, between checkpoint 4 and it, is always fine.
  h.inject = [&](long step, std::span<float>, double& loss) {
    ++calls;
    if (step == 5) loss = 1e6;
  };
  h.stop_requested = [&] { return calls > 200; };  // without the rule: stop, do not hang
  const TrainResult r = Trainer(c, dir.string(), false).run(h);
  EXPECT_TRUE(r.diverged);
  EXPECT_NE(r.stop_reason.find("4 rollbacks to the same checkpoint"), std::string::npos) << r.stop_reason;
  EXPECT_NE(r.stop_reason.find("step_00000004"), std::string::npos) << r.stop_reason;
  EXPECT_LT(calls, 30);
  int events = 0;
  for (const auto& rec : read_metrics(dir.string())) events += rec.value(metric::event, "") == "rollback";
  EXPECT_EQ(events, 4);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
