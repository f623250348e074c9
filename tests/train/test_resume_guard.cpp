// Resuming (and rewinding) a run whose spike guard has acted: after the checkpoint, every field
// of every metrics.jsonl line equals the straight run's, timings aside. A resume that restarted
// the token count, the skipped-step count or the guard's window would show here: the guard must
// skip a step after the checkpoint that only a window holding the steps before it can flag.
//
// The setting (deterministic: the spikes are injected, the guard's decisions follow from them):
// train.spike_window = 3, spike_threshold = 6, spike_policy = skip; at 1-based steps 4, 8 and 12
// the loss is raised by 50 and the gradients multiplied by 1000 (TrainHooks::inject). Each spike
// meets a full window of ordinary steps (z-scores in the thousands) and is skipped; a skipped step
// is still recorded in the window, so the three steps after each spike see it and no ordinary
// step can be flagged: the skipped steps are exactly 4, 8 and 12. Checkpoints every 5 steps.
// - resume from step 10 (an interrupted run): step 12's window is steps 9, 10, 11. A guard that
//   lost its window would have one step in it at step 12 (not full: no spike can be flagged).
// - rewind to step 5 (an older checkpoint): step 8's window is steps 5, 6, 7; likewise.
// Both runs also carry diagnostics (diag.interval = 4) and a cosine schedule over train.steps.
//
// Excluded from the comparison, and why: `time_s` and `tokens_per_s` of step lines and
// `tokens_per_s` and `wall_s` of the end event (and `comm_ms_per_step`, with several ranks) are
// wall-clock measurements. The end event's `train_loss` and `train_loss_steps` are compared: they
// once covered only the resumed process's steps (the ring of recent losses is now saved).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/checkpoint.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

constexpr int kSteps = 15;
const std::set<long> kSpikeSteps = {4, 8, 12};  // 1-based

Config guarded_run() {
  Config c = test::tiny_run(kSteps);
  c.optim.schedule = ScheduleKind::cosine;
  c.train.checkpoint_interval = 5;
  c.train.keep_checkpoints = 5;
  c.train.spike_policy = SpikePolicy::skip;
  c.train.spike_window = 3;
  c.train.spike_threshold = 6.0;
  c.train.max_bad_steps = 4;
  c.diag.interval = 4;
  return c;
}

TrainHooks spikes() {
  TrainHooks h;
  h.inject = [](long step0, std::span<float> g, double& loss) {
    if (!kSpikeSteps.count(step0 + 1)) return;
    loss += 50.0;
    for (auto& x : g) x *= 1000.0f;
  };
  return h;
}

// The metrics.jsonl lines with the wall-clock fields removed.
std::vector<nlohmann::json> lines_without_timings(const std::string& dir) {
  std::vector<nlohmann::json> out;
  for (auto j : read_metrics(dir)) {
    for (const char* k :
         {metric::time_s, metric::tokens_per_s, metric::wall_s, metric::comm_ms_per_step})
      j.erase(k);
    out.push_back(std::move(j));
  }
  return out;
}

// The fields in which two lines differ, "" when none: "step 12: skipped true / false, ...".
std::string differences(const nlohmann::json& a, const nlohmann::json& b) {
  std::string out;
  nlohmann::json keys = a;
  keys.update(b);
  for (const auto& [k, v] : keys.items()) {
    const nlohmann::json x = a.value(k, nlohmann::json()), y = b.value(k, nlohmann::json());
    if (x != y) out += fmt::format("{}{} {} / {}", out.empty() ? "" : ", ", k, x.dump(), y.dump());
  }
  if (out.empty()) return out;
  return fmt::format("{} {}: {}", a.contains(metric::event) ? "event" : "step",
                     a.value(metric::step, 0L), out);
}

// Every line after step `from` (step lines of later steps and the end event) is equal.
// (At least `min_lines` of them: the steps to the end and the end event.)
void expect_same_after(const std::vector<nlohmann::json>& straight,
                       const std::vector<nlohmann::json>& resumed, long from,
                       std::size_t min_lines = 0) {
  std::vector<nlohmann::json> a, b;
  for (const auto& j : straight)
    if (j.value(metric::step, 0L) > from) a.push_back(j);
  for (const auto& j : resumed)
    if (j.value(metric::step, 0L) > from) b.push_back(j);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_GE(a.size(), min_lines ? min_lines : static_cast<std::size_t>(kSteps - from + 1));
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(differences(a[i], b[i]), "") << "after " << from;
}

struct Straight {
  std::string dir;
  std::vector<nlohmann::json> lines;
  ~Straight() { fs::remove_all(dir); }
};

// The straight run, trained once for both tests; its premises checked.
const Straight& straight_run() {
  static const Straight s = [] {
    const std::string dir = test::temp_dir("resume_guard_straight");
    Trainer t(guarded_run(), dir, false);
    const TrainResult res = t.run(spikes());
    EXPECT_EQ(res.steps, kSteps);
    EXPECT_FALSE(res.diverged) << res.stop_reason;
    return Straight{dir, lines_without_timings(dir)};
  }();
  return s;
}

TEST(ResumeGuard, TheStraightRunSkipsExactlyTheSpikes) {
  const auto& s = straight_run();
  long skipped = 0, diag_lines = 0;
  std::set<long> seen;
  for (const auto& j : s.lines) {
    if (j.contains(metric::event)) continue;
    const long step = j[metric::step];
    seen.insert(step);
    const bool spike = kSpikeSteps.count(step) > 0;
    EXPECT_EQ(j[metric::spike].get<bool>(), spike) << step;
    EXPECT_EQ(j[metric::skipped].get<bool>(), spike) << step;
    skipped += spike;
    EXPECT_EQ(j[metric::skipped_total].get<long>(), skipped) << step;
    EXPECT_EQ(j[metric::tokens].get<long>(), step * 4 * 32) << step;  // batch 4 x seq_len 32
    diag_lines += j.contains("update_ratio");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(kSteps));  // log_interval 1: every step
  EXPECT_GT(diag_lines, 0);
}

TEST(ResumeGuard, AnInterruptedRunResumesAsTheStraightRun) {
  const auto& s = straight_run();
  const std::string dir = test::temp_dir("resume_guard_interrupted");
  {
    Trainer t(guarded_run(), dir, false);
    TrainHooks h = spikes();
    h.stop_requested = [&t] { return t.step() == 10; };
    const TrainResult r = t.run(h);
    EXPECT_EQ(r.stop_reason, "interrupted");
    EXPECT_EQ(r.steps, 10);
  }
  Trainer t(Config{}, dir, true);
  EXPECT_EQ(t.step(), 10);
  EXPECT_EQ(t.state().skipped_steps, 2);  // steps 4 and 8
  t.run(spikes());
  const auto resumed = lines_without_timings(dir);
  expect_same_after(s.lines, resumed, 10);
  expect_same_after(s.lines, resumed, 0);  // and the lines before it are the straight run's too
  fs::remove_all(dir);
}

TEST(ResumeGuard, ARewindToAnOlderCheckpointReplaysTheStraightRun) {
  const auto& s = straight_run();
  const std::string dir = test::temp_dir("resume_guard_rewound");
  fs::copy(s.dir, dir, fs::copy_options::recursive);
  ResumeOptions from;
  from.checkpoint = (fs::path(dir) / "checkpoints" / "step_00000005").string();
  from.rewind = true;
  Trainer t(Config{}, dir, true, from);
  EXPECT_EQ(t.step(), 5);
  EXPECT_EQ(t.state().skipped_steps, 1);  // step 4
  t.run(spikes());
  expect_same_after(s.lines, lines_without_timings(dir), 5);
  fs::remove_all(dir);
}

// The guard's count of consecutive bad steps crosses a checkpoint: non-finite losses at steps 9
// to 12 with train.max_bad_steps = 4 stop the straight run as diverged at step 12, and the run
// interrupted at step 10 and resumed must stop there too (a count restarted at the resume would
// let it train on to step 15).
TEST(ResumeGuard, ARunOfBadStepsAcrossTheCheckpointStopsWhereTheStraightRunStops) {
  auto bad_steps = [] {
    TrainHooks h;
    h.inject = [](long step0, std::span<float>, double& loss) {
      if (step0 + 1 >= 9 && step0 + 1 <= 12) loss = NAN;
    };
    return h;
  };
  // The stop reason names the run's checkpoint: the run directory is written RUN.
  auto lines = [](const std::string& dir) {
    auto out = lines_without_timings(dir);
    for (auto& j : out)
      if (j.contains(metric::detail)) {
        std::string d = j[metric::detail];
        for (std::size_t at; (at = d.find(dir)) != std::string::npos;)
          d.replace(at, dir.size(), "RUN");
        j[metric::detail] = d;
      }
    return out;
  };
  const std::string a = test::temp_dir("resume_guard_bad_straight");
  const std::string b = test::temp_dir("resume_guard_bad_resumed");
  {
    Trainer t(guarded_run(), a, false);
    const TrainResult r = t.run(bad_steps());
    EXPECT_TRUE(r.diverged);
    EXPECT_EQ(r.stop_step, 12);
  }
  {
    Trainer t(guarded_run(), b, false);
    TrainHooks h = bad_steps();
    h.stop_requested = [&t] { return t.step() == 10; };
    EXPECT_EQ(t.run(h).stop_reason, "interrupted");
  }
  Trainer t(Config{}, b, true);
  const TrainResult r = t.run(bad_steps());
  EXPECT_TRUE(r.diverged) << "the resumed run trained on to step " << r.steps;
  EXPECT_EQ(r.stop_step, 12);
  expect_same_after(lines(a), lines(b), 10, 3);  // steps 11, 12 and the end
  fs::remove_all(a);
  fs::remove_all(b);
}

}  // namespace
}  // namespace normlab
