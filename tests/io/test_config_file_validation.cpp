// Tests of the config's validation (src/config/config.cpp): every invalid value reported at once,
// each with where its value came from (the file's line, the `--set`, JSON), each rule triggered on
// its own, the boundary values accepted, and NaN and infinity from TOML refused.
#include "normlab/config_file.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "config_file_fixtures.h"
#include "normlab/config.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

using test::has_problem;
using test::parse_problems;

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

// Range errors say where the value came from, as type errors do: the file's line, or the `--set`
// that gave it (an override wins over the file); a rule about two keys points at the one set
// last; every problem is still reported at once.
TEST(ConfigFile, RangeErrorsNameTheLineOrTheSet) {
  const auto p = parse_problems(R"([model]
n_layer = 0
d_model = 130
norm_eps = 0.0
norm = "rmsnorm"
n_kv_head = 3
[optim]
lr = -1.0
beta2 = 2
)",
                                {"train.batch_size=0", "optim.beta2=1.0"});
  EXPECT_TRUE(has_problem(p, "cfg.toml:2: model.n_layer = 0 must be > 0"));
  EXPECT_TRUE(has_problem(p, "cfg.toml:3: model.d_model = 130 is not divisible by model.n_head"));
  // "model.norm" (line 5) is no match inside "model.norm_eps".
  EXPECT_TRUE(has_problem(p, "cfg.toml:4: model.norm_eps = 0 must be > 0"));
  // n_head kept its default: the line is n_kv_head's.
  EXPECT_TRUE(has_problem(p, "cfg.toml:6: model.n_head = 4 is not divisible by model.n_kv_head"));
  EXPECT_TRUE(has_problem(p, "cfg.toml:8: optim.lr = -1 must be > 0"));
  EXPECT_TRUE(has_problem(p, "--set 'train.batch_size=0': train.batch_size = 0 must be > 0"));
  EXPECT_TRUE(has_problem(p, "--set 'optim.beta2=1.0': optim.beta2 = 1 must be in [0, 1)"));
  EXPECT_EQ(p.size(), 7u);

  // A rule about two keys: the override that broke it.
  const auto two = parse_problems("[model]\nd_model = 128\n", {"model.n_head=3"});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0], "--set 'model.n_head=3': model.d_model = 128 is not divisible by "
                    "model.n_head = 3 (or set model.head_dim)");
  // From JSON, and from a file read by load_config (named by its path).
  EXPECT_TRUE(has_problem(
      test::problems_of([] { config_from_json(nlohmann::json{{"optim", {{"lr", -1}}}}); }),
      "json: optim.lr = -1 must be > 0"));
  // Keys that kept their defaults have no place to point at.
  EXPECT_TRUE(has_problem(parse_problems("[train]\neval_interval = 0\n", {"train.eval_batches=0",
                                                                         "train.eval_interval=5"}),
                          "--set 'train.eval_interval=5': train.eval_batches = 0 must be > 0 when "
                          "train.eval_interval = 5 > 0"));
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
      {"train.steps = -1 must be >= 1", [](Config& c) { c.train.steps = -1; }},
      {"train.steps = 0 must be >= 1", [](Config& c) { c.train.steps = 0; }},
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
  c.train.steps = 1;
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

}  // namespace
}  // namespace normlab
