// Tests of writing a config back (src/config/config_file.cpp): every key is covered, every key
// survives the TOML dump and JSON, JSON input goes through the same checks as TOML, and the enum
// names round-trip.
#include "normlab/config_file.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config_file_fixtures.h"
#include "normlab/config.h"

namespace normlab {
namespace {

using test::has_problem;
using test::problems_of;

// A valid config in which every field differs from its default (checked by EveryKeyIsCovered), so
// a round trip that drops or mangles any key fails.
Config every_key_changed() {
  Config c;
  ModelConfig& m = c.model;
  m.vocab_size = 300;
  m.n_layer = 3;
  m.d_model = 96;
  m.n_head = 6;
  m.d_ff = 192;
  m.d_ff_mult = 2.0;  // d_ff = 2 x d_model, as given
  m.seq_len = 64;
  m.placement = Placement::peri;
  m.mix_ratio = 0.5;
  m.norm = NormKind::rmsnorm;
  m.norm_eps = 1e-6;
  m.norm_bias = true;
  m.norm_gain_offset = 1.0;
  m.dyt_alpha_attn = 0.6;  // the DyT paper's LLaMA 13B recipe
  m.dyt_alpha_mlp = 0.15;
  m.dyt_alpha_final = 0.05;
  m.dyt_alpha_qk = 1.0 / 3.0;  // every bit kept
  m.residual_scale = ResidualScale::layerscale;
  m.layerscale_init = 1e-5;
  m.skipinit_init = 0.125;
  m.attn_gate = AttnGate::elementwise;
  m.sigma_reparam = true;
  m.ngpt_alpha_init = 0.0625;
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
  m.embed_init_std = 0.05;
  m.admin_omega = AdminOmega::logn;  // valid (a warning) with init = xavier
  m.hybrid_first_pre = true;         // valid (a warning) with placement = peri
  m.parametrization = Parametrization::mup;
  m.mup_base_width = 48;     // base: d_model 48, d_ff 100, 6 heads of 10 over 3 key/value heads
  m.mup_base_d_ff = 100;
  m.mup_base_head_dim = 10;
  m.mup_output_mult = 2.5;
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
  o.name = OptimizerKind::muon;
  o.qk_clip = 100.0;
  o.qk_clip_alpha = 0.25;
  o.schedule = ScheduleKind::linear;
  TrainConfig& t = c.train;
  t.seed = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  t.z_loss = 1e-4;
  t.steps = 1;
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
  t.data_seed = 7;
  t.stop_at = 20;
  c.data.path = "corpus dir/tiny \"shakespeare\"\\\t.txt";
  c.data.path_from_run = "../corpus dir/tiny.txt";
  c.data.val_fraction = 0.1;
  c.data.tokenizer = "tok/tokenizer.json";
  c.diag.interval = 7;
  c.diag.per_head = true;
  c.dist.deterministic = true;
  c.dist.bucket_size = 1000;
  c.source.kind = SourceKind::torch;
  c.source.trainer = "transformers.Trainer";
  c.source.unknown = {"optim.schedule", "train.grad_accum"};
  c.source.world_size = 2;
  c.source.sharding = "fsdp2";
  // The optimizers' own sections (declared in their files; no field to assign).
  for (const auto& [key, value] : std::vector<std::pair<const char*, const char*>>{
           {"model.attn_sink", "learned"},
           {"optim.muon.adamw_lr", "1e-3"},
           {"optim.muon.momentum", "0.9"},
           {"optim.muon.nesterov", "false"},
           {"optim.muon.ns_steps", "6"},
           {"optim.muon.ns_a", "3.0"},
           {"optim.muon.ns_b", "-4.0"},
           {"optim.muon.ns_c", "2.0"},
           {"optim.muon.ns_eps", "1e-6"},
           {"optim.muon.adjust_lr", "match_rms_adamw"},
           {"optim.adam_atan2.a", "1.0"},
           {"optim.adam_atan2.b", "2.0"},
           {"optim.adafactor.beta2_decay", "-0.5"},
           {"optim.adafactor.eps1", "1e-30"},
           {"optim.adafactor.eps2", "1e-2"},
           {"optim.adafactor.d", "1.5"},
           {"optim.soap.shampoo_beta", "0.9"},
           {"optim.soap.precondition_frequency", "3"},
           {"optim.soap.max_precond_dim", "512"},
           {"optim.soap.normalize_grads", "true"},
           {"optim.soap.correct_bias", "false"},
       })
    set_key(c, key, value);
  return c;
}

// The JSON value of "a.b.c" (nested: j["a"]["b"]["c"]), or null.
const nlohmann::json* json_at(const nlohmann::json& j, const std::string& key) {
  const nlohmann::json* at = &j;
  for (std::size_t b = 0, e = 0; e != std::string::npos; b = e + 1) {
    e = key.find('.', b);
    const std::string part = key.substr(b, e == std::string::npos ? e : e - b);
    if (!at->is_object() || !at->contains(part)) return nullptr;
    at = &(*at)[part];
  }
  return at;
}

std::size_t leaves(const nlohmann::json& j) {
  if (!j.is_object()) return 1;
  std::size_t n = 0;
  for (const auto& [k, v] : j.items()) n += leaves(v);
  return n;
}

TEST(ConfigFile, EveryKeyIsCovered) {
  const auto keys = config_keys();
  const nlohmann::json defaults = config_to_json(Config{});
  const nlohmann::json changed = config_to_json(every_key_changed());
  EXPECT_TRUE(validation_errors(every_key_changed()).empty())
      << fmt::format("{}", fmt::join(validation_errors(every_key_changed()), "\n"));

  EXPECT_EQ(keys.size(), leaves(defaults));

  for (const auto& key : keys) {
    const nlohmann::json *d = json_at(defaults, key), *x = json_at(changed, key);
    ASSERT_TRUE(d != nullptr && x != nullptr) << key;
    EXPECT_NE(*d, *x) << key << " has its default value in every_key_changed()";
  }
  for (const char* k : {"model.placement", "model.qk_norm_position", "optim.beta2", "train.seed",
                        "train.keep_checkpoints", "data.val_fraction", "diag.per_head",
                        "optim.muon.momentum", "optim.adafactor.d", "optim.soap.shampoo_beta"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
}

TEST(ConfigFile, EveryKeyRoundTripsThroughToml) {
  for (const Config& c : {Config{}, every_key_changed()}) {
    const std::string text = dump_config_toml(c);
    for (const auto& key : config_keys()) {
      // [source] is written only when it is not the default (normlab's own runs).
      if (key.starts_with("source.") && c.source == SourceConfig{}) continue;
      const std::string name = key.substr(key.rfind('.') + 1);
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

TEST(ConfigFile, EnumNamesRoundTrip) {
  for (const auto name : enum_names<Placement>())
    EXPECT_EQ(to_string(*enum_from_string<Placement>(name)), name);
  EXPECT_EQ(enum_names<Placement>().size(), 8u);
  EXPECT_EQ(to_string(Placement::deepnorm), "deepnorm");
  EXPECT_EQ(to_string(QKNormPosition::post_rope), "post_rope");
  EXPECT_EQ(to_string(MlpKind::gelu_tanh), "gelu_tanh");
  EXPECT_EQ(enum_from_string<ScheduleKind>("linear"), ScheduleKind::linear);
  EXPECT_FALSE(enum_from_string<NormKind>("LayerNorm").has_value());  // names are exact
  EXPECT_FALSE(enum_from_string<InitKind>("").has_value());
}

}  // namespace
}  // namespace normlab
