// Sweep grid parsing and the Wortsman et al. learning-rate sensitivity on hand-made runs.
#include <gtest/gtest.h>

#include <cmath>

#include "lab/sweep.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

TEST(Sweep, ParsesListsAndRanges) {
  auto a = parse_grid_axis("model.placement=post,pre,peri");
  EXPECT_EQ(a.key, "model.placement");
  EXPECT_EQ(a.values, (std::vector<std::string>{"post", "pre", "peri"}));
  auto b = parse_grid_axis("optim.lr=1e-4:1e-1:7log");
  ASSERT_EQ(b.values.size(), 7u);
  EXPECT_DOUBLE_EQ(std::stod(b.values.front()), 1e-4);
  EXPECT_DOUBLE_EQ(std::stod(b.values.back()), 1e-1);
  EXPECT_NEAR(std::stod(b.values[1]) / std::stod(b.values[0]), std::pow(10.0, 0.5), 1e-4);
  auto c = parse_grid_axis("optim.warmup_steps=0:100:3lin");
  EXPECT_EQ(c.values, (std::vector<std::string>{"0", "50", "100"}));
  for (const char* bad : {"model.placement", "=1,2", "optim.lr=", "optim.lr=1:2", "optim.lr=0:1:3log",
                          "optim.lr=1:2:3cubic", "model.placement=post,,pre"})
    EXPECT_THROW(parse_grid_axis(bad), ConfigError) << bad;
}

TEST(Sweep, ExpandsTheProductWithReadableNames) {
  const auto pts = expand_grid({parse_grid_axis("model.placement=post,pre"), parse_grid_axis("optim.lr=0.001,0.01")});
  ASSERT_EQ(pts.size(), 4u);
  EXPECT_EQ(pts[0].name, "placement-post_lr-0.001");
  EXPECT_EQ(pts[3].name, "placement-pre_lr-0.01");
}

SweepRun run(const std::string& placement, const std::string& lr, const std::string& status,
             double init, std::optional<double> fin) {
  SweepRun r;
  r.point.overrides = {{"model.placement", placement}, {"optim.lr", lr}};
  r.status = status;
  r.initial_loss = init;
  r.final_loss = fin;
  return r;
}

TEST(Sweep, LearningRateSensitivity) {
  // pre: losses 3.0, 2.5, 2.7 -> best 2.5, sensitivity mean(0.5, 0, 0.2) = 0.2333
  // post: 3.0, 2.6, diverged (counts as its initial loss 5.5) -> best 2.6,
  //       sensitivity mean(0.4, 0, 2.9) = 1.1
  const std::vector<SweepRun> runs = {
      run("pre", "0.001", "done", 5.5, 3.0), run("pre", "0.01", "done", 5.5, 2.5),
      run("pre", "0.1", "done", 5.5, 2.7),   run("post", "0.001", "done", 5.5, 3.0),
      run("post", "0.01", "done", 5.5, 2.6), run("post", "0.1", "diverged", 5.5, std::nullopt)};
  const auto s = lr_sensitivity(runs, "optim.lr");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].label, "placement=pre");
  EXPECT_NEAR(s[0].sensitivity, (0.5 + 0.0 + 0.2) / 3, 1e-12);
  EXPECT_NEAR(s[0].best_loss, 2.5, 1e-12);
  EXPECT_NEAR(s[0].best_lr, 0.01, 1e-12);
  EXPECT_NEAR(s[1].sensitivity, (0.4 + 0.0 + 2.9) / 3, 1e-12);
  EXPECT_EQ(s[1].diverged, 1);
  EXPECT_EQ(s[0].variant.size(), 1u);  // no internal bookkeeping leaks out
}

TEST(Sweep, DivergenceRule) {
  EXPECT_TRUE(sweep_divergence(3, NAN, 5.0));
  EXPECT_FALSE(sweep_divergence(3, 6.0, 5.0));  // early noise allowed
  EXPECT_TRUE(sweep_divergence(10, 5.1, 5.0));
  EXPECT_FALSE(sweep_divergence(10, 4.9, 5.0));
}

}  // namespace
}  // namespace normlab
