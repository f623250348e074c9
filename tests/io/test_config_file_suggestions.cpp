// Tests of the config's unknown keys and sections (src/config/config_file.cpp,
// src/config/keys.cpp): each is reported with the nearest valid name, or with none when nothing is
// close, and a huge key is reported quickly.
#include "normlab/config_file.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "config_file_fixtures.h"

namespace normlab {
namespace {

using test::has_problem;
using test::parse_problems;

TEST(ConfigFile, UnknownKeySuggestsNearest) {
  const auto p = parse_problems("[model]\nn_layer = 2\nn_layers = 2\n");
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "cfg.toml:3: unknown key 'model.n_layers' (did you mean 'model.n_layer'?)");

  // A right name in the wrong section, or outside any section.
  EXPECT_TRUE(has_problem(parse_problems("[train]\nlr = 0.1\n"),
                          "unknown key 'train.lr' (did you mean 'optim.lr'?)"));
  EXPECT_TRUE(has_problem(parse_problems("n_head = 2\n"),
                          "cfg.toml:1: unknown key 'n_head' (did you mean 'model.n_head'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optim]\nwarmup_step = 10\n"),
                          "unknown key 'optim.warmup_step' (did you mean 'optim.warmup_steps'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optim]\nbeta_2 = 0.9\n"),
                          "(did you mean 'optim.beta2'?)"));
  // Nothing close: no suggestion rather than a silly one.
  const auto far = parse_problems("[model]\nfrobnicate_everything = 1\n");
  ASSERT_EQ(far.size(), 1u);
  EXPECT_EQ(far[0], "cfg.toml:2: unknown key 'model.frobnicate_everything'");
}

// A key of 100,000 characters gets no suggestion and costs no O(n m) table per known key.
TEST(ConfigFile, HugeUnknownKeyIsReportedQuickly) {
  const std::string key(100000, 'n');
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = parse_problems("[model]\n" + key + " = 1\n");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].find("did you mean"), std::string::npos);
  EXPECT_NE(p[0].find("unknown key 'model.nnnn"), std::string::npos) << p[0].substr(0, 200);
  RecordProperty("seconds", std::to_string(s));  // for information; not a threshold
  // Typos still find their key when lengths differ by a little (the shortcut must not hide them).
  EXPECT_TRUE(has_problem(parse_problems("[model]\nn_lay = 2\n"), "(did you mean 'model.n_layer'?)"));
}

TEST(ConfigFile, UnknownSectionSuggestsNearest) {
  const auto p = parse_problems("[modle]\nn_layer = 2\n\n[optm]\nlr = 1.0\n");
  EXPECT_TRUE(has_problem(p, "cfg.toml:1: unknown section 'modle' (did you mean 'model'?)"));
  EXPECT_TRUE(has_problem(p, "unknown section 'optm' (did you mean 'optim'?)"));
  EXPECT_EQ(p.size(), 2u);  // the keys inside an unknown section are not reported one by one
  EXPECT_TRUE(has_problem(parse_problems("model = 3\n"), "'model' must be a table of keys"));
}

}  // namespace
}  // namespace normlab
