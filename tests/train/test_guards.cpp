// The guards against blow-ups, driven by fault injection: a non-finite gradient is skipped
// without touching parameters or moments; a spike is skipped, ignored or rolled back as the
// policy says; a divergence that persists stops the run naming the last good checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <optional>

#include "io/metrics.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/checkpoint.h"
#include "normlab/trainer.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

Config guard_config(int steps, SpikePolicy policy) {
  Config c;
  c.model.n_layer = 1;
  c.model.d_model = 16;
  c.model.n_head = 2;
  c.model.d_ff = 32;
  c.model.seq_len = 16;
  c.train.batch_size = 2;
  c.train.steps = steps;
  c.train.log_interval = 0;
  c.train.eval_interval = 0;
  c.train.checkpoint_interval = 10;
  c.train.keep_checkpoints = 3;
  c.train.threads = 1;
  c.train.spike_policy = policy;
  c.train.spike_window = 10;
  c.train.spike_threshold = 6.0;
  c.train.max_bad_steps = 4;
  c.optim.warmup_steps = 0;
  c.optim.lr = 1e-3;
  return c;
}

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("normlab_guard_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p.string();
}

struct Snapshot {
  std::vector<float> p, state;  // parameters; every optimizer state arena, concatenated
  explicit Snapshot(const Trainer& t) : p(t.params().begin(), t.params().end()) {
    for (const auto& [name, a] : t.optimizer_state()) state.insert(state.end(), a.begin(), a.end());
  }
  bool operator==(const Snapshot& o) const { return p == o.p && state == o.state; }
};

// Runs `steps` steps, injecting `fault` at 0-based step `at`; captures the state right before
// and right after that step.
struct Outcome {
  std::optional<Snapshot> before, after;
  TrainResult result;
};

Outcome run_with_fault(Trainer& t, long at, const std::function<void(std::span<float>, double&)>& fault) {
  Outcome o;
  TrainHooks h;
  h.inject = [&](long step, std::span<float> g, double& loss) {
    if (step == at) {
      o.before.emplace(t);  // parameters and moments before this step's update
      fault(g, loss);
    }
    if (step == at + 1 && !o.after) o.after.emplace(t);
  };
  o.result = t.run(h);
  return o;
}

TEST(Guards, NonFiniteGradientIsSkippedUntouched) {
  const std::string dir = temp_dir("nan");
  Trainer t(guard_config(8, SpikePolicy::skip), dir, false);
  auto o = run_with_fault(t, 4, [](std::span<float> g, double&) { g[3] = std::numeric_limits<float>::quiet_NaN(); });
  ASSERT_TRUE(o.before && o.after);
  EXPECT_TRUE(*o.before == *o.after) << "the skipped step changed parameters or moments";
  EXPECT_EQ(t.state().skipped_steps, 1);
  EXPECT_EQ(o.result.steps, 8);
  const auto m = read_metrics(dir);
  bool logged = false;
  for (const auto& r : m)
    if (r["step"] == 5) logged = r["skipped"].get<bool>() && r["nonfinite"].get<bool>();
  EXPECT_TRUE(logged);
  fs::remove_all(dir);
}

TEST(Guards, NonFiniteLossIsSkippedUntouched) {
  const std::string dir = temp_dir("infloss");
  Trainer t(guard_config(8, SpikePolicy::off), dir, false);  // even with spikes off
  auto o = run_with_fault(t, 2, [](std::span<float>, double& loss) { loss = INFINITY; });
  ASSERT_TRUE(o.before && o.after);
  EXPECT_TRUE(*o.before == *o.after);
  EXPECT_EQ(t.state().skipped_steps, 1);
  fs::remove_all(dir);
}

auto spike = [](std::span<float> g, double& loss) {
  for (auto& x : g) x *= 1000.0f;
  loss += 50.0;
};

TEST(Guards, SpikeSkipPolicy) {
  const std::string dir = temp_dir("skip");
  Trainer t(guard_config(25, SpikePolicy::skip), dir, false);
  auto o = run_with_fault(t, 15, spike);
  ASSERT_TRUE(o.before && o.after);
  EXPECT_TRUE(*o.before == *o.after);
  EXPECT_EQ(t.state().skipped_steps, 1);
  EXPECT_EQ(o.result.steps, 25);
  fs::remove_all(dir);
}

TEST(Guards, SpikeOffPolicyOnlyFlags) {
  const std::string dir = temp_dir("off");
  Trainer t(guard_config(25, SpikePolicy::off), dir, false);
  auto o = run_with_fault(t, 15, spike);
  ASSERT_TRUE(o.before && o.after);
  EXPECT_FALSE(*o.before == *o.after);
  EXPECT_EQ(t.state().skipped_steps, 0);
  bool flagged = false;
  for (const auto& r : read_metrics(dir))
    if (r["step"] == 16) flagged = r["spike"].get<bool>() && !r["skipped"].get<bool>();
  EXPECT_TRUE(flagged);
  fs::remove_all(dir);
}

TEST(Guards, SpikeRollbackPolicy) {
  const std::string dir = temp_dir("rollback");
  Trainer t(guard_config(30, SpikePolicy::rollback), dir, false);
  // Spike at 0-based step 24: the last checkpoint is step 20.
  TrainHooks h;
  int injected = 0;
  h.inject = [&](long step, std::span<float> g, double& loss) {
    if (step == 24 && injected++ == 0) spike(g, loss);
  };
  std::vector<nlohmann::json> events;
  h.on_event = [&](const nlohmann::json& e) { events.push_back(e); };
  const TrainResult r = t.run(h);
  EXPECT_EQ(r.steps, 30);
  EXPECT_FALSE(r.diverged);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "rollback");
  EXPECT_EQ(events[0]["to_step"], 20);
  EXPECT_EQ(t.state().extra["rollbacks"], 1);
  // The offending batches were skipped: more batches drawn than steps taken.
  EXPECT_EQ(t.state().sampler_draws, 30 + 5);
  // Recorded in metrics.jsonl as an event.
  bool found = false;
  for (const auto& m : read_metrics(dir)) found |= m.value("event", "") == "rollback";
  EXPECT_TRUE(found);
  fs::remove_all(dir);
}

// A rollback restores a state that is not parameter-shaped as it was saved: right after rolling
// back to step 20, the parameters and the optimizer's state (Adafactor's row/column factors,
// SOAP's statistics and eigenbases) are those of the step-20 checkpoint, loaded here into a fresh
// optimizer.
void rollback_restores_the_state_of(OptimizerKind kind) {
  const std::string dir = temp_dir(std::string("rollback_") + std::string(to_string(kind)));
  Config c = guard_config(30, SpikePolicy::rollback);
  c.optim.name = kind;
  set_key(c, "optim.soap.precondition_frequency", "3");  // SOAP's eigenbases refreshed after steps 19 and 22
  Trainer t(c, dir, false);
  TrainHooks h;
  int injected = 0;
  h.inject = [&](long step, std::span<float> g, double& loss) {
    if (step == 24 && injected++ == 0) spike(g, loss);
  };
  std::optional<Snapshot> restored;
  h.on_event = [&](const nlohmann::json& e) {
    if (e["event"] == "rollback") restored.emplace(t);
  };
  EXPECT_EQ(t.run(h).steps, 30);
  ASSERT_TRUE(restored.has_value());
  Transformer<float> model(c.model, 1, 8);
  const auto opt = make_optimizer<float>(model.table(), c.optim, c.model);
  load_checkpoint((fs::path(dir) / "checkpoints" / "step_00000020").string(), model, opt.get(),
                  nullptr);
  EXPECT_EQ(opt->steps_taken(), 20);
  std::vector<float> state;
  for (const StateArena<float>* a : std::as_const(*opt).state())
    state.insert(state.end(), a->data.begin(), a->data.end());
  EXPECT_TRUE(restored->p == std::vector<float>(model.params().begin(), model.params().end()));
  EXPECT_TRUE(restored->state == state);
  fs::remove_all(dir);
}

TEST(Guards, RollbackRestoresAdafactorsFactoredState) {
  rollback_restores_the_state_of(OptimizerKind::adafactor);
}

TEST(Guards, RollbackRestoresSoapsMatrixState) {
  rollback_restores_the_state_of(OptimizerKind::soap);
}

TEST(Guards, LevelShiftDoesNotFreezeTraining) {
  // A lasting jump of the loss level (not a one-off spike): the first shifted step is skipped,
  // then the shifted values in the window make it the new normal and updates resume. (With a
  // window of accepted steps only, every later step would be skipped until max_bad_steps.)
  const std::string dir = temp_dir("shift");
  Trainer t(guard_config(40, SpikePolicy::skip), dir, false);
  TrainHooks h;
  h.inject = [](long step, std::span<float> g, double& loss) {
    if (step >= 20) {
      loss += 2.0;
      for (auto& x : g) x *= 50.0f;
    }
  };
  const TrainResult r = t.run(h);
  EXPECT_FALSE(r.diverged) << r.stop_reason;
  EXPECT_EQ(r.steps, 40);
  EXPECT_EQ(t.state().skipped_steps, 1);
  fs::remove_all(dir);
}

TEST(Guards, PersistentDivergenceStopsNamingCheckpoint) {
  const std::string dir = temp_dir("persist");
  Trainer t(guard_config(40, SpikePolicy::skip), dir, false);
  TrainHooks h;
  h.inject = [](long step, std::span<float> g, double&) {
    if (step >= 12) g[0] = std::numeric_limits<float>::infinity();
  };
  const TrainResult r = t.run(h);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.steps, 16);  // 4 bad steps in a row (max_bad_steps)
  EXPECT_NE(r.stop_reason.find("step 16"), std::string::npos) << r.stop_reason;
  EXPECT_NE(r.stop_reason.find("step_00000010"), std::string::npos) << r.stop_reason;
  // That checkpoint is still loadable.
  EXPECT_NO_THROW(checkpoint_config(latest_checkpoint(dir)));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
