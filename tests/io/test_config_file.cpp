// Tests of the typed config boundary: TOML parsing, overrides, the TOML dump, JSON, suggestions
// and validation (src/io/config_file.cpp, src/model/config.cpp).
#include "normlab/config_file.h"

#include <gtest/gtest.h>

#include <chrono>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "normlab/config.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

// Runs `f`, which must throw ConfigError, and returns its problems.
std::vector<std::string> problems_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.problems;
  }
  ADD_FAILURE() << "expected a ConfigError";
  return {};
}

std::vector<std::string> parse_problems(std::string_view toml,
                                        const std::vector<std::string>& overrides = {}) {
  return problems_of([&] { parse_config(toml, "cfg.toml", overrides); });
}

::testing::AssertionResult has_problem(const std::vector<std::string>& problems,
                                       std::string_view needle) {
  for (const auto& p : problems)
    if (p.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no problem contains [" << needle << "]; got:\n  "
         << fmt::format("{}", fmt::join(problems, "\n  "));
}

// A valid config in which every field differs from its default (checked by EveryKeyIsCovered), so
// a round trip that drops or mangles any key fails.
Config every_key_changed() {
  Config c;
  ModelConfig& m = c.model;
  m.vocab_size = 300;
  m.n_layer = 3;
  m.d_model = 96;
  m.n_head = 6;
  m.d_ff = 200;
  m.seq_len = 64;
  m.placement = Placement::peri;
  m.mix_ratio = 0.5;
  m.norm = NormKind::rmsnorm;
  m.norm_eps = 1e-6;
  m.norm_bias = true;
  m.norm_gain_offset = 1.0;
  m.qk_norm = QKNormKind::layernorm;
  m.qk_norm_scope = QKNormScope::full;
  m.qk_norm_position = QKNormPosition::post_rope;
  m.pos = PosKind::learned;
  m.rope_theta = 500000.0;
  m.n_kv_head = 3;
  m.head_dim = 20;
  m.rope_scaling = RopeScaling::llama3;
  m.rope_factor = 8.0;
  m.rope_low_freq_factor = 2.0;
  m.rope_high_freq_factor = 8.0;
  m.rope_original_seq_len = 32;
  m.sliding_window = 16;
  m.layer_pattern = "every:2";
  m.rope_local_theta = 10000.0;
  m.mlp = MlpKind::swiglu;
  m.bias = true;
  m.attn_qkv_bias = true;
  m.attn_out_bias = true;
  m.mlp_bias = true;
  m.tie_embeddings = false;
  m.attn_softcap = 50.0;
  m.final_softcap = 30.0;
  m.attn_scale = 0.125;
  m.embed_scale = std::sqrt(96.0);  // not exactly representable in short decimal
  m.init = InitKind::xavier;
  m.init_std = 0.1 + 0.2;  // 0.30000000000000004: the dump must keep every bit
  OptimConfig& o = c.optim;
  o.lr = 3e-4;
  o.min_lr_ratio = 0.0;
  o.beta1 = 0.85;
  o.beta2 = 0.999;
  o.eps = 1e-10;
  o.weight_decay = 0.0;
  o.decay_embeddings = false;
  o.grad_clip = 0.5;
  o.warmup_steps = 0;
  o.schedule = ScheduleKind::linear;
  TrainConfig& t = c.train;
  t.seed = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  t.z_loss = 1e-4;
  t.steps = 0;
  t.batch_size = 3;
  t.grad_accum = 4;
  t.eval_interval = 0;
  t.eval_batches = 0;
  t.log_interval = 1;
  t.checkpoint_interval = 0;
  t.keep_checkpoints = 5;
  t.threads = 2;
  t.spike_policy = SpikePolicy::rollback;
  t.spike_window = 20;
  t.spike_threshold = 4.5;
  t.max_bad_steps = 3;
  t.matmul_precision = MatmulPrecision::bf16;
  t.init_from = "runs/base run";
  c.data.path = "corpus dir/tiny \"shakespeare\"\\\t.txt";
  c.data.val_fraction = 0.1;
  c.data.tokenizer = "tok/tokenizer.json";
  c.diag.interval = 7;
  c.diag.per_head = true;
  c.dist.deterministic = true;
  c.dist.bucket_size = 1000;
  return c;
}

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

TEST(ConfigFile, EveryKeyIsCovered) {
  const auto keys = config_keys();
  const nlohmann::json defaults = config_to_json(Config{});
  const nlohmann::json changed = config_to_json(every_key_changed());
  EXPECT_TRUE(validation_errors(every_key_changed()).empty())
      << fmt::format("{}", fmt::join(validation_errors(every_key_changed()), "\n"));

  std::size_t json_keys = 0;
  for (const auto& [section, body] : defaults.items()) json_keys += body.size();
  EXPECT_EQ(keys.size(), json_keys);

  for (const auto& key : keys) {
    const auto dot = key.find('.');
    ASSERT_NE(dot, std::string::npos) << key;
    const std::string section = key.substr(0, dot), name = key.substr(dot + 1);
    ASSERT_TRUE(defaults.contains(section) && defaults[section].contains(name)) << key;
    EXPECT_NE(defaults[section][name], changed[section][name])
        << key << " has its default value in every_key_changed()";
  }
  for (const char* k : {"model.placement", "model.qk_norm_position", "optim.beta2", "train.seed",
                        "train.keep_checkpoints", "data.val_fraction", "diag.per_head"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

TEST(ConfigFile, EveryKeyRoundTripsThroughToml) {
  for (const Config& c : {Config{}, every_key_changed()}) {
    const std::string text = dump_config_toml(c);
    for (const auto& key : config_keys()) {
      const std::string name = key.substr(key.find('.') + 1);
      EXPECT_NE(text.find("\n" + name + " = "), std::string::npos)
          << key << " missing from\n" << text;
    }
    EXPECT_EQ(parse_config(text, "dump.toml"), c) << text;
  }
  const std::string text = dump_config_toml(every_key_changed());
  EXPECT_NE(text.find("placement = \"peri\""), std::string::npos) << text;
  EXPECT_NE(text.find("qk_norm_position = \"post_rope\""), std::string::npos) << text;
  EXPECT_NE(text.find("rope_theta = 500000.0\n"), std::string::npos) << text;  // stays a float
}

TEST(ConfigFile, EveryKeyRoundTripsThroughJson) {
  for (const Config& c : {Config{}, every_key_changed()}) {
    const nlohmann::json j = config_to_json(c);
    EXPECT_EQ(config_from_json(j), c);
    EXPECT_EQ(config_from_json(nlohmann::json::parse(j.dump())), c);  // through text as well
  }
  const nlohmann::json j = config_to_json(every_key_changed());
  EXPECT_EQ(j["model"]["placement"], "peri");
  EXPECT_EQ(j["model"]["qk_norm_scope"], "full");
  EXPECT_EQ(j["optim"]["schedule"], "linear");
  EXPECT_TRUE(j["model"]["n_layer"].is_number_integer());
  EXPECT_TRUE(j["model"]["norm_bias"].is_boolean());
  // Keys left out of the JSON keep their defaults.
  Config expected;
  expected.model.n_layer = 9;
  EXPECT_EQ(config_from_json(nlohmann::json{{"model", {{"n_layer", 9}}}}), expected);
}

TEST(ConfigFile, JsonErrorsUseTheSameChecks) {
  const auto p = problems_of([] {
    config_from_json(nlohmann::json{
        {"model", {{"n_layers", 2}, {"d_model", "128"}, {"placement", "sideways"}, {"n_head", 0}}},
        {"optim", {{"lr", nullptr}}},
        {"trian", nlohmann::json::object()}});
  });
  EXPECT_TRUE(has_problem(p, "unknown key 'model.n_layers' (did you mean 'model.n_layer'?)"));
  EXPECT_TRUE(has_problem(p, "model.d_model: expected an integer, got \"128\" (a string)"));
  EXPECT_TRUE(has_problem(p, "model.placement: unknown value \"sideways\""));
  EXPECT_TRUE(has_problem(p, "optim.lr: expected a number, got null"));
  EXPECT_TRUE(has_problem(p, "unknown section 'trian' (did you mean 'train'?)"));
  EXPECT_TRUE(has_problem(p, "model.n_head = 0 must be > 0"));
  EXPECT_EQ(p.size(), 6u);
  EXPECT_TRUE(has_problem(problems_of([] { config_from_json(nlohmann::json::array()); }),
                          "expected an object of sections"));
  EXPECT_TRUE(has_problem(problems_of([] { config_from_json(nlohmann::json{{"model", 3}}); }),
                          "'model' must be an object of keys"));
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
  EXPECT_TRUE(has_problem(p, "override 'model.n_layer': expected section.key=value (no '=')"));
  EXPECT_TRUE(has_problem(p, "override '=3': expected section.key=value (empty key)"));
  EXPECT_TRUE(has_problem(p, "override 'model.n_layer=': model.n_layer: missing value"));
  EXPECT_TRUE(has_problem(p, "model.n_layer: expected an integer, got \"abc\" (a string)"));
  EXPECT_TRUE(has_problem(p, "model.d_ff: expected an integer, got 2.5 (a float)"));
  EXPECT_TRUE(has_problem(p, "unknown key 'n_layer' (did you mean 'model.n_layer'?)"));
  EXPECT_TRUE(has_problem(p, "unknown section 'modle' (did you mean 'model'?)"));
  EXPECT_TRUE(has_problem(p, "model.norm_bias: expected a boolean (true or false), got \"yes\""));
  EXPECT_TRUE(has_problem(p, "model.placement: unknown value \"sideways\""));
  EXPECT_EQ(p.size(), 9u);
}

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

TEST(ConfigFile, UnknownSectionSuggestsNearest) {
  const auto p = parse_problems("[modle]\nn_layer = 2\n\n[optm]\nlr = 1.0\n");
  EXPECT_TRUE(has_problem(p, "cfg.toml:1: unknown section 'modle' (did you mean 'model'?)"));
  EXPECT_TRUE(has_problem(p, "unknown section 'optm' (did you mean 'optim'?)"));
  EXPECT_EQ(p.size(), 2u);  // the keys inside an unknown section are not reported one by one
  EXPECT_TRUE(has_problem(parse_problems("model = 3\n"), "'model' must be a table of keys"));
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
  EXPECT_TRUE(has_problem(
      p, "model.placement: expected one of post, pre, peri, reordered, deepnorm, mix, got 3"));
  EXPECT_TRUE(
      has_problem(p, "model.norm: unknown value \"batchnorm\" (allowed: layernorm, rmsnorm)"));
  EXPECT_TRUE(has_problem(p, "model.rope_theta: expected a number, got \"big\" (a string)"));
  EXPECT_TRUE(has_problem(p, "model.init: expected one of gpt2, normal, xavier, got a table"));
  EXPECT_TRUE(has_problem(p, "train.seed: -1 is out of range (0 .. 18446744073709551615)"));
  EXPECT_TRUE(has_problem(p, "data.path: expected a string, got 5 (an integer)"));
  EXPECT_EQ(p.size(), 13u);
}

TEST(ConfigFile, SeveralInvalidValuesAllReportedAtOnce) {
  const auto p = parse_problems(R"([model]
n_layer = 0
d_model = 130
n_head = 4
norm_eps = nan
n_heads = 4
placement = "sideways"
[optim]
lr = -1.0
beta2 = 1.0
)",
                                {"train.batch_size=0", "data.val_fraction=1"});
  EXPECT_TRUE(has_problem(p, "model.n_layer = 0 must be > 0"));
  EXPECT_TRUE(has_problem(p, "model.d_model = 130 is not divisible by model.n_head = 4"));
  EXPECT_TRUE(has_problem(p, "model.norm_eps = nan must be > 0"));
  EXPECT_TRUE(has_problem(p, "unknown key 'model.n_heads' (did you mean 'model.n_head'?)"));
  EXPECT_TRUE(has_problem(p, "model.placement: unknown value \"sideways\""));
  EXPECT_TRUE(has_problem(p, "optim.lr = -1 must be > 0"));
  EXPECT_TRUE(has_problem(p, "optim.beta2 = 1 must be in [0, 1)"));
  EXPECT_TRUE(has_problem(p, "train.batch_size = 0 must be > 0"));
  EXPECT_TRUE(has_problem(p, "data.val_fraction = 1 must be in [0, 1)"));
  EXPECT_EQ(p.size(), 9u);
}

struct Rule {
  std::string_view expect;
  std::function<void(Config&)> mutate;
};

TEST(ConfigFile, EachValidationRuleTriggers) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Rule> rules = {
      {"model.vocab_size = 0 must be > 0", [](Config& c) { c.model.vocab_size = 0; }},
      {"model.n_layer = -1 must be > 0", [](Config& c) { c.model.n_layer = -1; }},
      {"model.d_model = 0 must be > 0", [](Config& c) { c.model.d_model = 0; }},
      {"model.n_head = 0 must be > 0", [](Config& c) { c.model.n_head = 0; }},
      {"model.d_ff = 0 must be > 0", [](Config& c) { c.model.d_ff = 0; }},
      {"model.seq_len = 0 must be > 0", [](Config& c) { c.model.seq_len = 0; }},
      {"model.d_model = 130 is not divisible by model.n_head = 4",
       [](Config& c) { c.model.d_model = 130; }},
      {"model.d_model / model.n_head = 132 / 4 = 33 is an odd head dimension; model.pos = \"rope\"",
       [](Config& c) { c.model.d_model = 132; }},
      {"model.norm_eps = 0 must be > 0", [](Config& c) { c.model.norm_eps = 0.0; }},
      {"model.n_kv_head = -1 must be >= 0", [](Config& c) { c.model.n_kv_head = -1; }},
      {"model.n_head = 4 is not divisible by model.n_kv_head = 3",
       [](Config& c) { c.model.n_kv_head = 3; }},
      {"model.head_dim = -2 must be >= 0", [](Config& c) { c.model.head_dim = -2; }},
      {"model.head_dim = 7 is odd; model.pos = \"rope\" needs an even one",
       [](Config& c) { c.model.head_dim = 7; }},
      {"model.rope_scaling = 7 is not a valid value (allowed: none, linear, llama3)",
       [](Config& c) { c.model.rope_scaling = static_cast<RopeScaling>(7); }},
      {"model.rope_factor = 0 must be > 0", [](Config& c) { c.model.rope_factor = 0.0; }},
      {"model.rope_low_freq_factor = 0 must be > 0",
       [](Config& c) { c.model.rope_low_freq_factor = 0.0; }},
      {"model.rope_high_freq_factor = nan must be > 0",
       [nan](Config& c) { c.model.rope_high_freq_factor = nan; }},
      {"model.rope_original_seq_len = 0 must be > 0",
       [](Config& c) { c.model.rope_original_seq_len = 0; }},
      {"model.rope_high_freq_factor = 1 must be > model.rope_low_freq_factor = 2",
       [](Config& c) {
         c.model.rope_scaling = RopeScaling::llama3;
         c.model.rope_low_freq_factor = 2.0;
         c.model.rope_high_freq_factor = 1.0;
       }},
      {"model.sliding_window = -1 must be >= 0", [](Config& c) { c.model.sliding_window = -1; }},
      {"model.rope_local_theta = -1 must be >= 0",
       [](Config& c) { c.model.rope_local_theta = -1.0; }},
      {"model.layer_pattern = \"every:0\" is not valid: \"every:K\" needs an integer K >= 1",
       [](Config& c) { c.model.layer_pattern = "every:0"; }},
      {"model.layer_pattern = \"global,slide\" is not valid: \"slide\" is not a layer type",
       [](Config& c) { c.model.layer_pattern = "global,slide"; }},
      {"model.layer_pattern = \"global,sliding\" lists 2 layer types; model.n_layer = 4",
       [](Config& c) { c.model.layer_pattern = "global,sliding"; }},
      {"model.layer_pattern = \"sliding\" has sliding layers: set model.sliding_window > 0",
       [](Config& c) { c.model.layer_pattern = "sliding"; }},
      {"model.sliding_window = 64 has no effect: model.layer_pattern = \"global\"",
       [](Config& c) { c.model.sliding_window = 64; }},
      {"model.rope_local_theta = 100 has no effect: no layer is sliding",
       [](Config& c) { c.model.rope_local_theta = 100.0; }},
      {"model.norm_eps = nan must be > 0", [nan](Config& c) { c.model.norm_eps = nan; }},
      {"model.attn_softcap = -1 must be >= 0", [](Config& c) { c.model.attn_softcap = -1.0; }},
      {"model.final_softcap = -0.5 must be >= 0", [](Config& c) { c.model.final_softcap = -0.5; }},
      {"model.final_softcap = nan must be >= 0", [nan](Config& c) { c.model.final_softcap = nan; }},
      {"model.mix_ratio = 1.5 must be in [0, 1]", [](Config& c) { c.model.mix_ratio = 1.5; }},
      {"model.mix_ratio = -0.1 must be in [0, 1]", [](Config& c) { c.model.mix_ratio = -0.1; }},
      {"model.mix_ratio = nan must be in [0, 1]", [nan](Config& c) { c.model.mix_ratio = nan; }},
      {"model.rope_theta = 0 must be > 0", [](Config& c) { c.model.rope_theta = 0.0; }},
      {"model.rope_theta = inf must be > 0", [inf](Config& c) { c.model.rope_theta = inf; }},
      {"model.attn_scale = -1 must be >= 0", [](Config& c) { c.model.attn_scale = -1.0; }},
      {"model.embed_scale = 0 must be > 0", [](Config& c) { c.model.embed_scale = 0.0; }},
      {"model.init_std = 0 must be > 0", [](Config& c) { c.model.init_std = 0.0; }},
      {"model.init_std = nan must be > 0", [nan](Config& c) { c.model.init_std = nan; }},
      {"model.norm_gain_offset = nan must be a finite number",
       [nan](Config& c) { c.model.norm_gain_offset = nan; }},
      {"model.placement = 42 is not a valid value (allowed: post, pre, peri",
       [](Config& c) { c.model.placement = static_cast<Placement>(42); }},
      {"optim.lr = 0 must be > 0", [](Config& c) { c.optim.lr = 0.0; }},
      {"optim.lr = nan must be > 0", [nan](Config& c) { c.optim.lr = nan; }},
      {"optim.beta1 = 1 must be in [0, 1)", [](Config& c) { c.optim.beta1 = 1.0; }},
      {"optim.beta1 = -0.1 must be in [0, 1)", [](Config& c) { c.optim.beta1 = -0.1; }},
      {"optim.beta2 = nan must be in [0, 1)", [nan](Config& c) { c.optim.beta2 = nan; }},
      {"optim.eps = 0 must be > 0", [](Config& c) { c.optim.eps = 0.0; }},
      {"optim.weight_decay = -0.1 must be >= 0", [](Config& c) { c.optim.weight_decay = -0.1; }},
      {"optim.grad_clip = -1 must be >= 0", [](Config& c) { c.optim.grad_clip = -1.0; }},
      {"optim.warmup_steps = -1 must be >= 0", [](Config& c) { c.optim.warmup_steps = -1; }},
      {"optim.min_lr_ratio = 1.1 must be in [0, 1]", [](Config& c) { c.optim.min_lr_ratio = 1.1; }},
      {"optim.min_lr_ratio = -0.1 must be in [0, 1]",
       [](Config& c) { c.optim.min_lr_ratio = -0.1; }},
      {"train.steps = -1 must be >= 0", [](Config& c) { c.train.steps = -1; }},
      {"train.batch_size = 0 must be > 0", [](Config& c) { c.train.batch_size = 0; }},
      {"train.grad_accum = 0 must be > 0", [](Config& c) { c.train.grad_accum = 0; }},
      {"train.eval_interval = -1 must be >= 0", [](Config& c) { c.train.eval_interval = -1; }},
      {"train.log_interval = -1 must be >= 0", [](Config& c) { c.train.log_interval = -1; }},
      {"train.checkpoint_interval = -5 must be >= 0",
       [](Config& c) { c.train.checkpoint_interval = -5; }},
      {"diag.interval = -1 must be >= 0", [](Config& c) { c.diag.interval = -1; }},
      {"train.eval_batches = -1 must be >= 0", [](Config& c) { c.train.eval_batches = -1; }},
      {"train.eval_batches = 0 must be > 0 when train.eval_interval = 100 > 0",
       [](Config& c) { c.train.eval_batches = 0; }},
      {"train.keep_checkpoints = 0 must be >= 1", [](Config& c) { c.train.keep_checkpoints = 0; }},
      {"train.threads = -1 must be >= 0", [](Config& c) { c.train.threads = -1; }},
      {"train.z_loss = -0.001 must be >= 0", [](Config& c) { c.train.z_loss = -1e-3; }},
      {"train.z_loss = nan must be >= 0", [nan](Config& c) { c.train.z_loss = nan; }},
      {"train.seed = 9223372036854775808 must be <= 9223372036854775807",
       [](Config& c) { c.train.seed = 9223372036854775808ull; }},
      {"data.val_fraction = 1 must be in [0, 1)", [](Config& c) { c.data.val_fraction = 1.0; }},
      {"data.val_fraction = -0.5 must be in [0, 1)", [](Config& c) { c.data.val_fraction = -0.5; }},
      {"data.val_fraction = nan must be in [0, 1)",
       [nan](Config& c) { c.data.val_fraction = nan; }},
  };
  for (const auto& rule : rules) {
    Config c;
    rule.mutate(c);
    const auto errors = validation_errors(c);
    EXPECT_EQ(errors.size(), 1u) << rule.expect << "\n"
                                 << fmt::format("{}", fmt::join(errors, "\n"));
    EXPECT_TRUE(has_problem(errors, rule.expect));
    EXPECT_THROW(validate(c), ConfigError) << rule.expect;
  }
}

TEST(ConfigFile, BoundaryValuesAreValid) {
  Config c;
  c.train.steps = 0;
  c.optim.min_lr_ratio = 1.0;
  c.optim.beta1 = 0.0;
  c.optim.warmup_steps = 0;
  c.optim.weight_decay = 0.0;
  c.optim.grad_clip = 0.0;
  c.model.mix_ratio = 1.0;
  c.model.attn_softcap = 0.0;
  c.model.attn_scale = 0.0;
  c.data.val_fraction = 0.0;
  c.train.keep_checkpoints = 1;
  c.train.threads = 0;
  c.train.eval_interval = 0;
  c.train.eval_batches = 0;
  c.model.d_model = 132;  // odd head dim (33) is fine without RoPE
  c.model.pos = PosKind::learned;
  EXPECT_TRUE(validation_errors(c).empty())
      << fmt::format("{}", fmt::join(validation_errors(c), "\n"));
  EXPECT_NO_THROW(validate(c));
}

TEST(ConfigFile, NanAndInfFromTomlAreRejected) {
  const auto p =
      parse_problems("[optim]\nlr = nan\nweight_decay = inf\n[model]\nnorm_eps = -inf\n");
  EXPECT_TRUE(has_problem(p, "optim.lr = nan must be > 0"));
  EXPECT_TRUE(has_problem(p, "optim.weight_decay = inf must be >= 0"));
  EXPECT_TRUE(has_problem(p, "model.norm_eps = -inf must be > 0"));
  EXPECT_EQ(p.size(), 3u);
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
  EXPECT_TRUE(has_problem(p, path + ":3: unknown key 'model.extra'"));
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

TEST(ConfigFile, EnumNamesRoundTrip) {
  for (const auto name : enum_names<Placement>())
    EXPECT_EQ(to_string(*enum_from_string<Placement>(name)), name);
  EXPECT_EQ(enum_names<Placement>().size(), 6u);
  EXPECT_EQ(to_string(Placement::deepnorm), "deepnorm");
  EXPECT_EQ(to_string(QKNormPosition::post_rope), "post_rope");
  EXPECT_EQ(to_string(MlpKind::gelu_tanh), "gelu_tanh");
  EXPECT_EQ(enum_from_string<ScheduleKind>("linear"), ScheduleKind::linear);
  EXPECT_FALSE(enum_from_string<NormKind>("LayerNorm").has_value());  // names are exact
  EXPECT_FALSE(enum_from_string<InitKind>("").has_value());
}

}  // namespace
}  // namespace normlab
