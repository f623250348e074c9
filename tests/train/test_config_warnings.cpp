// config_warnings: the valid-but-suspicious settings `normlab train` prints and the Python package
// raises as NormlabWarning (one list, so the two cannot drift apart).
#include <gtest/gtest.h>

#include "train/config_warnings.h"

namespace normlab {
namespace {

TEST(ConfigWarnings, NoneForTheDefaults) {
  EXPECT_TRUE(config_warnings(Config{}, 4).empty());
}

TEST(ConfigWarnings, WarmupLongerThanTheRun) {
  Config c;
  c.train.steps = 2;
  c.optim.warmup_steps = 50;
  c.optim.lr = 1e-3;
  const auto w = config_warnings(c, 4);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0],
            "optim.warmup_steps = 50 is greater than train.steps = 2: the warmup never ends, the "
            "learning rate peaks at 4e-05 instead of optim.lr = 0.001");
  c.optim.warmup_steps = 2;  // a warmup that ends on the last step is fine
  EXPECT_TRUE(config_warnings(c, 4).empty());
}

TEST(ConfigWarnings, MoreThreadsThanCores) {
  Config c;
  c.train.threads = 5;
  const auto w = config_warnings(c, 4);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0],
            "train.threads = 5 is more than the 4 cores available to this process: the threads "
            "will share cores, which slows training down");
  c.train.threads = 4;
  EXPECT_TRUE(config_warnings(c, 4).empty());
  c.train.threads = 0;  // all cores
  EXPECT_TRUE(config_warnings(c, 4).empty());
}

TEST(ConfigWarnings, BothInOrder) {
  Config c;
  c.train.steps = 2;
  c.optim.warmup_steps = 3;
  c.train.threads = 9;
  const auto w = config_warnings(c, 8);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rfind("optim.warmup_steps", 0), 0u);
  EXPECT_EQ(w[1].rfind("train.threads", 0), 0u);
}

}  // namespace
}  // namespace normlab
