// Seeds: the statistics over a cell's seeds, the "within the seed spread" notes, and the seeded
// sensitivity and comparison tables (one seed: exactly the single-seed tables).
#include <gtest/gtest.h>

#include <cmath>

#include "lab/compare.h"
#include "lab/seeds.h"
#include "lab/sweep.h"

namespace normlab {
namespace {

TEST(Seeds, StatsAreMeanSampleStdAndRangeOverFiniteValues) {
  const SeedStats s = seed_stats({2.0, 4.0, NAN, 6.0});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.std, 2.0);  // sample std: sqrt((4 + 0 + 4) / 2)
  EXPECT_DOUBLE_EQ(s.min, 2.0);
  EXPECT_DOUBLE_EQ(s.max, 6.0);
  EXPECT_EQ(format_spread(s), "4.0000 ± 2.0000 (2.0000–6.0000)");
  EXPECT_EQ(format_spread(seed_stats({1.5})), "1.5000");
  EXPECT_TRUE(std::isnan(seed_stats({1.5}).std));
  EXPECT_EQ(format_spread(seed_stats({NAN})), "-");
}

TEST(Seeds, SeedZeroKeepsTheCellsDirectory) {
  EXPECT_EQ(seed_dir_name("pre", 0), "pre");
  EXPECT_EQ(seed_dir_name("pre", 2), "pre_seed2");
  const auto pts = expand_seeds(expand_grid({parse_grid_axis("optim.lr=0.1,0.2")}), 2);
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].name, "lr-0.1");
  EXPECT_EQ(pts[1].name, "lr-0.1_seed1");
  EXPECT_EQ(pts[1].seed, 1);
  EXPECT_EQ(pts[3].name, "lr-0.2_seed1");
  EXPECT_EQ(expand_seeds(expand_grid({parse_grid_axis("optim.lr=0.1,0.2")}), 1).size(), 2u);
  Config c;
  c.train.seed = 1337;
  apply_seed(c, pts[1]);
  EXPECT_EQ(c.train.seed, 1338u);
}

TEST(Seeds, NoteOnlyWhenTheDifferenceIsWithinTheSpread) {
  const SeedStats pre = seed_stats({2.00, 2.04, 2.06});   // mean 2.0333, std 0.0306
  const SeedStats peri = seed_stats({2.03, 2.06, 2.07});  // mean 2.0533, std 0.0208
  const SeedStats post = seed_stats({3.00, 3.01, 3.02});
  const auto notes = seed_spread_notes({{"pre", pre}, {"peri", peri}, {"post", post}}, "val loss");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "pre vs peri: val loss difference 0.0200 is within the seed spread (std 0.0306)");
  // One seed has no spread: no note.
  EXPECT_TRUE(seed_spread_notes({{"a", seed_stats({1.0})}, {"b", seed_stats({1.0})}}, "x").empty());
}

SweepRun run(const std::string& placement, const std::string& lr, int seed, double fin) {
  SweepRun r;
  r.point.overrides = {{"model.placement", placement}, {"optim.lr", lr}};
  r.point.seed = seed;
  r.status = std::isfinite(fin) ? "done" : "diverged";
  r.initial_loss = 5.5;
  if (std::isfinite(fin)) r.final_loss = fin;
  return r;
}

TEST(Seeds, SensitivityPerSeedThenMeanAndBand) {
  // pre seed 0: 3.0, 2.5 -> best 2.5 at 0.01, sensitivity 0.25; seed 1: 2.6, 2.8 -> best 2.6 at
  // 0.001, sensitivity 0.1. post seed 0: 3.0, 2.9; seed 1: 3.0, diverged (5.5).
  const std::vector<SweepRun> runs = {
      run("pre", "0.001", 0, 3.0),  run("pre", "0.01", 0, 2.5),  run("pre", "0.001", 1, 2.6),
      run("pre", "0.01", 1, 2.8),   run("post", "0.001", 0, 3.0), run("post", "0.01", 0, 2.9),
      run("post", "0.001", 1, 3.0), run("post", "0.01", 1, NAN)};
  const auto s = lr_sensitivity(runs, "optim.lr");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].seeds, 2);
  ASSERT_EQ(s[0].seed_sensitivity.size(), 2u);
  EXPECT_NEAR(s[0].seed_sensitivity[0], 0.25, 1e-12);
  EXPECT_NEAR(s[0].seed_sensitivity[1], 0.1, 1e-12);
  EXPECT_NEAR(s[0].sensitivity, 0.175, 1e-12);
  EXPECT_NEAR(s[0].best_loss, 2.55, 1e-12);
  EXPECT_NEAR(s[0].seed_best_lr[0], 0.01, 1e-12);
  EXPECT_NEAR(s[0].seed_best_lr[1], 0.001, 1e-12);
  EXPECT_NEAR(s[0].best_lr, 0.01, 1e-12);  // mean curve: 2.8 at 0.001, 2.65 at 0.01
  ASSERT_EQ(s[0].lrs.size(), 2u);
  EXPECT_NEAR(s[0].final_losses[0], 2.8, 1e-12);
  EXPECT_NEAR(s[0].final_loss_min[0], 2.6, 1e-12);
  EXPECT_NEAR(s[0].final_loss_max[0], 3.0, 1e-12);
  EXPECT_EQ(s[1].diverged, 1);
  const std::string t = sensitivity_table(s);
  EXPECT_NE(t.find("| model.placement=pre | 2 | 0.1750 ± 0.1061 (0.1000–0.2500) | 2.5500 ± 0.0707 "
                   "(2.5000–2.6000) | 0.01 (0.01, 0.001) | 0/4 |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("mean ± sample standard deviation (min–max)"), std::string::npos) << t;
  const auto j = sweep_json({}, runs, s, "optim.lr");
  EXPECT_EQ(j["seeds"], 2);
  EXPECT_EQ(j["runs"][2]["seed"], 1);
  EXPECT_EQ(j["sensitivity"][0]["final_loss_max"][0], 3.0);
  EXPECT_NEAR(j["sensitivity"][0]["sensitivity_stats"]["std"].get<double>(), std::sqrt(0.01125), 1e-12);
}

TEST(Seeds, OneSeedTablesAndJsonAreTheSingleSeedOnes) {
  const std::vector<SweepRun> runs = {run("pre", "0.001", 0, 3.0), run("pre", "0.01", 0, 2.5)};
  const auto s = lr_sensitivity(runs, "optim.lr");
  EXPECT_EQ(s[0].seeds, 1);
  EXPECT_TRUE(s[0].final_loss_min.empty());
  const std::string t = sensitivity_table(s);
  EXPECT_EQ(t.find("±"), std::string::npos) << t;
  EXPECT_EQ(t.rfind("| variant | LR sensitivity (final val loss) | best final val loss | best lr | "
                    "diverged |\n", 0), 0u) << t;
  const auto j = sweep_json({}, runs, s, "optim.lr");
  EXPECT_FALSE(j.contains("seeds"));
  EXPECT_FALSE(j["runs"][0].contains("seed"));
  EXPECT_FALSE(j["sensitivity"][0].contains("final_loss_min"));
}

CompareRow compare_row(Placement p, int seed, double val) {
  CompareRow r;
  r.placement = p;
  r.variant = std::string(to_string(p));
  r.seed = seed;
  r.train_seed = 1337 + seed;
  r.run_dir = "x";
  r.result.steps = 300;
  r.result.stop_reason = "done";
  r.result.train_loss = val + 0.05;
  r.result.train_loss_steps = 20;
  r.val_loss = val;
  r.bits_per_byte = val / 0.69;
  return r;
}

TEST(Seeds, ComparisonTableGivesMeanStdRangeAndTheNote) {
  const std::vector<CompareRow> rows = {
      compare_row(Placement::pre, 0, 2.00), compare_row(Placement::pre, 1, 2.04),
      compare_row(Placement::pre, 2, 2.06), compare_row(Placement::peri, 0, 2.03),
      compare_row(Placement::peri, 1, 2.06), compare_row(Placement::peri, 2, 2.07),
      compare_row(Placement::post, 0, 3.00), compare_row(Placement::post, 1, 3.01),
      compare_row(Placement::post, 2, 3.02)};
  const std::string t = comparison_table(rows);
  EXPECT_NE(t.find("| pre | 3 | done | 300 | 2.0833 ± 0.0306 (2.0500–2.1100) | 2.0333 ± 0.0306 "
                   "(2.0000–2.0600) |"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("pre vs peri: val loss difference 0.0200 is within the seed spread (std 0.0306)."),
            std::string::npos)
      << t;
  EXPECT_EQ(t.find("pre vs post"), std::string::npos) << t;
  EXPECT_NE(t.find("| pre (seed 1338) | done |"), std::string::npos) << t;
  // One seed: one line per run, named by its placement, no statistics.
  const std::string one = comparison_table({compare_row(Placement::pre, 0, 2.0)});
  EXPECT_EQ(one.find("±"), std::string::npos) << one;
  EXPECT_NE(one.find("| pre | done | 300 |"), std::string::npos) << one;
}

}  // namespace
}  // namespace normlab
