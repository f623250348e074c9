// Tests of reading a config (src/config/config_file.cpp): TOML sections and enum names, overrides
// applied in order, bad overrides, values that are not UTF-8, the bf16 matmul key, type errors in
// the file's line order, syntax errors, and load_config on files and unreadable paths.
#include "normlab/config_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config_file_fixtures.h"
#include "normlab/config.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

using test::has_problem;
using test::parse_problems;
using test::problems_of;

TEST(ConfigFile, DefaultsParse) {
  EXPECT_TRUE(validation_errors(Config{}).empty());
  EXPECT_EQ(parse_config("", "empty.toml"), Config{});
  EXPECT_EQ(parse_config("# only a comment\n[model]\n", "c.toml"), Config{});
  EXPECT_EQ(load_config(""), Config{});
}

TEST(ConfigFile, ParsesSectionsAndEnumNames) {
  const Config c = parse_config(R"(
[model]
n_layer = 6
placement = "peri"
qk_norm = "rmsnorm"
qk_norm_position = "post_rope"
mlp = "gelu_tanh"
norm_bias = true
embed_scale = 2        # float keys accept integers

[optim]
lr = 3e-4
schedule = "constant"

[train]
seed = 7

[data]
path = "data/tiny.txt"
)",
                                "cfg.toml");
  EXPECT_EQ(c.model.n_layer, 6);
  EXPECT_EQ(c.model.placement, Placement::peri);
  EXPECT_EQ(c.model.qk_norm, QKNormKind::rmsnorm);
  EXPECT_EQ(c.model.qk_norm_position, QKNormPosition::post_rope);
  EXPECT_EQ(c.model.mlp, MlpKind::gelu_tanh);
  EXPECT_TRUE(c.model.norm_bias);
  EXPECT_EQ(c.model.embed_scale, 2.0);
  EXPECT_EQ(c.optim.lr, 3e-4);
  EXPECT_EQ(c.optim.schedule, ScheduleKind::constant);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.data.path, "data/tiny.txt");
  EXPECT_EQ(c.model.d_model, ModelConfig{}.d_model);  // untouched keys keep defaults
}

TEST(ConfigFile, OverridesApplyInOrderAndLaterWins) {
  const Config c = parse_config("[model]\nn_layer = 2\nplacement = \"post\"\n", "cfg.toml",
                                {"model.n_layer=3", "model.n_layer = 5", "model.placement=peri",
                                 "optim.lr=1e-3", "model.norm_bias=true", "optim.eps=1",
                                 "train.seed=42", "data.path=/tmp/my corpus.txt",
                                 "model.qk_norm_position=\"post_rope\""});
  EXPECT_EQ(c.model.n_layer, 5);
  EXPECT_EQ(c.model.placement, Placement::peri);
  EXPECT_EQ(c.optim.lr, 1e-3);
  EXPECT_EQ(c.optim.eps, 1.0);  // an integer for a float key
  EXPECT_TRUE(c.model.norm_bias);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_EQ(c.data.path, "/tmp/my corpus.txt");
  EXPECT_EQ(c.model.qk_norm_position, QKNormPosition::post_rope);

  // String keys keep digits and quotes are TOML strings; an empty value clears a string.
  EXPECT_EQ(parse_config("", "x", {"data.path=123"}).data.path, "123");
  EXPECT_EQ(parse_config("", "x", {"data.path=\"a b\\tc\""}).data.path, "a b\tc");
  EXPECT_EQ(parse_config("[data]\npath = \"x\"\n", "x", {"data.path="}).data.path, "");
  // Overrides can repair an invalid file value: validation sees the final config.
  EXPECT_EQ(parse_config("[model]\nn_layer = 0\n", "x", {"model.n_layer=1"}).model.n_layer, 1);
}

TEST(ConfigFile, BadOverridesAreReported) {
  const auto p = parse_problems("", {"model.n_layer", "=3", "model.n_layer=", "model.n_layer=abc",
                                     "model.d_ff=2.5", "n_layer=2", "modle.n_layer=2",
                                     "model.norm_bias=yes", "model.placement=sideways"});
  EXPECT_TRUE(has_problem(p, "--set 'model.n_layer': expected section.key=value (no '=')"));
  EXPECT_TRUE(has_problem(p, "--set '=3': expected section.key=value (empty key)"));
  EXPECT_TRUE(has_problem(p, "--set 'model.n_layer=': model.n_layer: missing value"));
  EXPECT_TRUE(has_problem(p, "model.n_layer: expected an integer, got \"abc\" (a string)"));
  EXPECT_TRUE(has_problem(p, "model.d_ff: expected an integer, got 2.5 (a float)"));
  EXPECT_TRUE(has_problem(p, "unknown key 'n_layer' (did you mean 'model.n_layer'?)"));
  EXPECT_TRUE(has_problem(p, "unknown section 'modle' (did you mean 'model'?)"));
  EXPECT_TRUE(has_problem(p, "model.norm_bias: expected a boolean (true or false), got \"yes\""));
  EXPECT_TRUE(has_problem(p, "model.placement: unknown value \"sideways\""));
  EXPECT_EQ(p.size(), 9u);
}

// Found by fuzzing: a value that is not UTF-8 (here from an override, as a raw byte path would
// arrive) could not be written back to the run's config.toml; and a bare non-ASCII character is a
// TOML syntax error, reported as a ConfigError rather than anything else.
TEST(ConfigFile, NonUtf8AndNonAsciiInputAreConfigErrors) {
  EXPECT_TRUE(has_problem(parse_problems("", {"data.path=corpus\xe9.txt"}),
                          "data.path: not valid UTF-8 (byte 6 of the value)"));
  EXPECT_FALSE(parse_problems("a\xc2\xa7").empty());  // "a§"
  // Valid UTF-8 in a string value is kept as it is.
  const Config c = parse_config("[data]\npath = \"d\xc3\xa9j\xc3\xa0.txt\"\n", "cfg.toml", {});
  EXPECT_EQ(c.data.path, "d\xc3\xa9j\xc3\xa0.txt");
}

// The opt-in bf16 matmul path's key: default, file, override, round trip, bad value.
TEST(ConfigFile, MatmulPrecision) {
  EXPECT_EQ(parse_config("", "t.toml", {}).train.matmul_precision, MatmulPrecision::float32);
  EXPECT_EQ(parse_config("[train]\nmatmul_precision = \"bf16\"\n", "t.toml", {}).train.matmul_precision,
            MatmulPrecision::bf16);
  EXPECT_EQ(parse_config("", "t.toml", {"train.matmul_precision=bf16"}).train.matmul_precision,
            MatmulPrecision::bf16);
  const Config c = parse_config("[train]\nmatmul_precision = \"bf16\"\n", "t.toml", {});
  EXPECT_EQ(parse_config(dump_config_toml(c), "dump", {}), c);
  try {
    parse_config("[train]\nmatmul_precision = \"fp16\"\n", "bad.toml", {});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "bad.toml:2: train.matmul_precision: unknown value \"fp16\" (allowed: float32, bf16, auto)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConfigFile, ProblemsFollowTheFilesLineOrder) {
  const auto p = parse_problems("[optim]\nschedule = 1\n[model]\nplacement = 2\nd_model = \"x\"\n");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].rfind("cfg.toml:2: optim.schedule", 0), 0u) << p[0];
  EXPECT_EQ(p[1].rfind("cfg.toml:4: model.placement", 0), 0u) << p[1];
  EXPECT_EQ(p[2].rfind("cfg.toml:5: model.d_model", 0), 0u) << p[2];
}

TEST(ConfigFile, TypeErrorsAreReported) {
  const auto p = parse_problems(R"([model]
n_layer = 2.0
d_model = "128"
n_head = 2.5
d_ff = 3000000000
seq_len = true
vocab_size = [256]
norm_bias = 1
placement = 3
norm = "batchnorm"
rope_theta = "big"
init = { kind = "gpt2" }
[train]
seed = -1
[data]
path = 5
)");
  EXPECT_TRUE(has_problem(p, "cfg.toml:2: model.n_layer: expected an integer, got 2.0 (a float)"));
  EXPECT_TRUE(
      has_problem(p, "cfg.toml:3: model.d_model: expected an integer, got \"128\" (a string)"));
  EXPECT_TRUE(has_problem(p, "model.n_head: expected an integer, got 2.5 (a float)"));
  EXPECT_TRUE(has_problem(p, "model.d_ff: 3000000000 is out of range (-2147483648 .. 2147483647)"));
  EXPECT_TRUE(has_problem(p, "model.seq_len: expected an integer, got true (a boolean)"));
  EXPECT_TRUE(has_problem(p, "model.vocab_size: expected an integer, got an array"));
  EXPECT_TRUE(
      has_problem(p, "model.norm_bias: expected a boolean (true or false), got 1 (an integer)"));
  // Every placement's name, in the enum's order (a new placement adds its own, no edit here).
  EXPECT_TRUE(has_problem(p, fmt::format("model.placement: expected one of {}, got 3",
                                         fmt::join(enum_names<Placement>(), ", "))));
  EXPECT_TRUE(has_problem(p, "model.placement: expected one of post, pre, peri, reordered, "));
  // Every norm kind's name likewise (a new kind adds its own).
  EXPECT_TRUE(has_problem(p, fmt::format("model.norm: unknown value \"batchnorm\" (allowed: {})",
                                         fmt::join(enum_names<NormKind>(), ", "))));
  EXPECT_TRUE(has_problem(p, "model.norm: unknown value \"batchnorm\" (allowed: layernorm, "));
  EXPECT_TRUE(has_problem(p, "model.rope_theta: expected a number, got \"big\" (a string)"));
  EXPECT_TRUE(
      has_problem(p, "model.init: expected one of gpt2, normal, xavier, admin, got a table"));
  EXPECT_TRUE(has_problem(p, "train.seed: -1 is out of range (0 .. 18446744073709551615)"));
  EXPECT_TRUE(has_problem(p, "data.path: expected a string, got 5 (an integer)"));
  EXPECT_EQ(p.size(), 13u);
}

TEST(ConfigFile, SyntaxErrorNamesSourceAndLine) {
  const auto p =
      problems_of([] { parse_config("[model]\nn_layer = 2\nd_model = = 3\n", "bad.toml"); });
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].rfind("bad.toml:3:", 0), 0u) << p[0];
  EXPECT_NE(p[0].find("TOML syntax error"), std::string::npos) << p[0];

  const auto dup =
      problems_of([] { parse_config("[model]\nn_layer = 2\nn_layer = 3\n", "dup.toml"); });
  ASSERT_EQ(dup.size(), 1u);
  EXPECT_EQ(dup[0].rfind("dup.toml:3:", 0), 0u) << dup[0];

  // Override problems are still reported next to the syntax error.
  const auto both = problems_of([] { parse_config("[model\n", "b.toml", {"model.n_layers=2"}); });
  EXPECT_TRUE(has_problem(both, "b.toml:1:"));
  EXPECT_TRUE(has_problem(both, "unknown key 'model.n_layers'"));
  EXPECT_EQ(both.size(), 2u);
}

TEST(ConfigFile, LoadConfigReadsFilesAndNamesUnreadablePaths) {
  const auto dir =
      std::filesystem::temp_directory_path() /
      fmt::format("normlab_config_test_{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto path = (dir / "run.toml").string();
  {
    std::ofstream out(path);
    out << "[model]\nn_layer = 7\n[model.extra]\n";
  }
  const auto p = problems_of([&] { load_config(path); });
  EXPECT_TRUE(has_problem(p, path + ":3: unknown section 'model.extra'"));
  {
    std::ofstream out(path);
    out << "[model]\nn_layer = 7\n";
  }
  EXPECT_EQ(load_config(path, {"model.d_ff=64"}).model.n_layer, 7);
  EXPECT_EQ(load_config(path, {"model.d_ff=64"}).model.d_ff, 64);

  const std::string missing = (dir / "no_such_file.toml").string();
  const auto m = problems_of([&] { load_config(missing); });
  ASSERT_EQ(m.size(), 1u);
  EXPECT_NE(m[0].find("cannot read config file '" + missing + "'"), std::string::npos) << m[0];
  EXPECT_TRUE(has_problem(problems_of([&] { load_config(dir.string()); }), "is a directory"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace normlab
