// config.toml's [source] table (include/normlab/config.h): written only when it is not the
// default, read back equal from TOML, JSON and overrides (a list as a TOML array or comma words),
// and every entry of source.unknown checked against the key table, by name.
#include <gtest/gtest.h>

#include <string>

#include "normlab/config.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab::source_config_test {
namespace {

Config torch_source_run() {
  Config c;
  c.source.kind = SourceKind::torch;
  c.source.trainer = "transformers.Trainer";
  c.source.unknown = {"optim.schedule", "optim.warmup_steps", "train.grad_accum"};
  c.source.world_size = 2;
  c.source.sharding = "ddp";
  return c;
}

std::string source_problems(const std::string& toml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(toml, "cfg.toml", sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SourceConfig, DefaultIsNotWrittenAndReadsBackEqual) {
  const Config c;
  const std::string toml = dump_config_toml(c);
  EXPECT_EQ(toml.find("[source]"), std::string::npos) << toml;
  EXPECT_EQ(parse_config(toml, "dump"), c);
  EXPECT_TRUE(c.source.knows("optim.lr"));
}

TEST(SourceConfig, RoundTripsThroughTomlAndJson) {
  const Config c = torch_source_run();
  const std::string toml = dump_config_toml(c);
  EXPECT_NE(toml.find("[source]\nkind = \"torch\""), std::string::npos) << toml;
  EXPECT_NE(toml.find("unknown = [\"optim.schedule\", \"optim.warmup_steps\", "
                      "\"train.grad_accum\"]"),
            std::string::npos)
      << toml;
  EXPECT_EQ(parse_config(toml, "dump"), c);
  EXPECT_EQ(config_from_json(nlohmann::json::parse(config_to_json(c).dump())), c);
  EXPECT_FALSE(c.source.knows("optim.schedule"));
  EXPECT_TRUE(c.source.knows("optim.lr"));
}

TEST(SourceConfig, OverridesTakeAnArrayOrCommaWords) {
  const Config a =
      parse_config("", "x", {"source.kind=torch", "source.unknown=optim.lr, optim.schedule"});
  EXPECT_EQ(a.source.kind, SourceKind::torch);
  EXPECT_EQ(a.source.unknown, (std::vector<std::string>{"optim.lr", "optim.schedule"}));
  const Config b = parse_config("", "x", {"source.unknown=[\"train.grad_accum\"]"});
  EXPECT_EQ(b.source.unknown, std::vector<std::string>{"train.grad_accum"});
  const Config e = parse_config("[source]\nunknown = [\"optim.lr\"]\n", "x", {"source.unknown="});
  EXPECT_TRUE(e.source.unknown.empty());
}

TEST(SourceConfig, EveryBadEntryIsNamed) {
  const std::string m = source_problems(
      "[source]\nkind = \"jax\"\nunknown = [\"optim.lrr\", \"source.kind\", \"model.n_layer\"]\n"
      "world_size = 0\n");
  EXPECT_NE(m.find("source.kind: unknown value \"jax\" (allowed: normlab, torch)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("source.unknown: unknown key 'optim.lrr' (did you mean 'optim.lr'?)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("'source.kind' cannot be unknown"), std::string::npos) << m;
  EXPECT_NE(m.find("source.world_size = 0 must be > 0"), std::string::npos) << m;
  EXPECT_EQ(m.find("model.n_layer"), std::string::npos) << m;  // a valid key is accepted
  const std::string t = source_problems("[source]\nunknown = [1, 2]\n");
  EXPECT_NE(t.find("source.unknown: expected an array of strings, got an array"),
            std::string::npos)
      << t;
  const std::string s = source_problems("", {"source.unknown=optim"});
  EXPECT_NE(s.find("source.unknown: unknown key 'optim'"), std::string::npos) << s;
}

}  // namespace
}  // namespace normlab::source_config_test
