// The checks a key owns (src/config/key_checks.h) and their place in the key table: the message
// "<key> = <value> <rule>", NaN and infinity refused by every float rule, the bound shown in the
// field's type, a check that holds under one option only, and every row's checks run by
// validation_errors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "config/key_checks.h"
#include "config/keys.h"
#include "normlab/config.h"

namespace normlab {
namespace {

using keytab::Problems;

template <class Check, class T>
Problems run_check(const Check& check, const T& v, const Config& c = {}) {
  Problems out;
  check("k.x", v, c, out);
  return out;
}

TEST(KeyChecks, MessagesNameTheKeyTheValueAndTheRule) {
  using namespace keytab::check;
  EXPECT_TRUE(run_check(positive(), 1).empty());
  EXPECT_EQ(run_check(positive(), 0), Problems{"k.x = 0 must be > 0"});
  EXPECT_EQ(run_check(positive(), -1.5), Problems{"k.x = -1.5 must be > 0"});
  EXPECT_EQ(run_check(greater_than(1), 1), Problems{"k.x = 1 must be > 1"});
  EXPECT_EQ(run_check(non_negative(), -1), Problems{"k.x = -1 must be >= 0"});
  EXPECT_EQ(run_check(at_least(1), 0), Problems{"k.x = 0 must be >= 1"});
  EXPECT_EQ(run_check(in_half_open(0, 1), 1.0), Problems{"k.x = 1 must be in [0, 1)"});
  EXPECT_TRUE(run_check(in_closed(0, 1), 1.0).empty());
  EXPECT_EQ(run_check(less_than(100, "(why)"), 100), Problems{"k.x = 100 must be < 100 (why)"});
  EXPECT_EQ(run_check(at_most(std::uint64_t{5}, "(why)"), std::uint64_t{6}),
            Problems{"k.x = 6 must be <= 5 (why)"});
  EXPECT_EQ(run_check(is_finite(), INFINITY), Problems{"k.x = inf must be a finite number"});
}

// Every float rule refuses NaN and infinity, whatever its bound.
TEST(KeyChecks, FloatRulesRefuseNanAndInfinity) {
  using namespace keytab::check;
  for (const double v : {std::nan(""), double(INFINITY), -double(INFINITY)}) {
    EXPECT_EQ(run_check(positive(), v).size(), 1u) << v;
    EXPECT_EQ(run_check(non_negative(), v).size(), 1u) << v;
    EXPECT_EQ(run_check(in_closed(0, 1), v).size(), 1u) << v;
    EXPECT_EQ(run_check(less_than(100, ""), v).size(), 1u) << v;
    EXPECT_EQ(run_check(is_finite(), v).size(), 1u) << v;
  }
}

TEST(KeyChecks, WhenChecksOnlyUnderItsOption) {
  using namespace keytab::check;
  const auto under_post = [](const Config& c) { return c.model.placement == Placement::post; };
  Config post;
  post.model.placement = Placement::post;
  EXPECT_TRUE(run_check(when(under_post, positive()), 0.0).empty());
  EXPECT_EQ(run_check(when(under_post, positive()), 0.0, post).size(), 1u);
}

// An enum value outside its names is refused by number, with the names allowed.
TEST(KeyChecks, EnumKeysCheckMembership) {
  Problems out;
  keytab::check::valid_enum("model.pos", static_cast<PosKind>(7), out);
  EXPECT_EQ(out, Problems{"model.pos = 7 is not a valid value (allowed: rope, learned)"});
  Config c;
  c.model.pos = static_cast<PosKind>(7);
  c.train.spike_policy = static_cast<SpikePolicy>(9);
  const auto errors = validation_errors(c);
  EXPECT_EQ(errors.size(), 2u);
  for (const auto& k : keytab::key_table()) {
    if (k.kind == keytab::Kind::enumeration) {
      EXPECT_FALSE(k.checks.empty()) << k.full;
    }
  }
}

// The key table's checks are what validation_errors reports for one bad key, each from its row.
TEST(KeyChecks, RowsCarryTheirKeysChecks) {
  Config c;
  c.optim.beta2 = 1.0;
  c.model.mix_ratio = -0.5;
  c.train.seed = std::uint64_t{1} << 63;
  const Problems want = {"model.mix_ratio = -0.5 must be in [0, 1]",
                         "optim.beta2 = 1 must be in [0, 1)",
                         "train.seed = 9223372036854775808 must be <= 9223372036854775807 (the "
                         "largest TOML integer)"};
  Problems rows;
  for (const char* section : {"model", "optim", "train"}) keytab::check_keys(c, section, rows);
  EXPECT_EQ(rows, want);
  EXPECT_EQ(validation_errors(c), want);
}

}  // namespace
}  // namespace normlab
