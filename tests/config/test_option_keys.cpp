// The optimizers' own sections (src/config/option_keys.h: a key declared in its optimizer's file,
// [optim.<name>]): read from TOML tables, nested JSON and dotted overrides; their earlier flat
// names (optim.momentum, optim.soap_shampoo_beta) still read, as older configs and checkpoints
// hold them; checked by the key's own rule and refused by name when unknown; stored only while
// they differ from the default.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/config_file_fixtures.h"
#include "normlab/config.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "train/optimizers/muon.h"

namespace normlab {
namespace {

using test::has_problem;
using test::parse_problems;
using test::problems_of;

TEST(OptionKeys, EveryOptimizersSectionIsInTheKeyList) {
  const auto keys = config_keys();
  for (const char* k : {"optim.muon.momentum", "optim.muon.adjust_lr", "optim.adam_atan2.a",
                        "optim.adafactor.eps1", "optim.soap.max_precond_dim"})
    EXPECT_NE(std::find(keys.begin(), keys.end(), k), keys.end()) << k;
  // Sections follow [optim]'s own keys, in the order of optim.name's values.
  const auto at = [&](const char* k) { return std::find(keys.begin(), keys.end(), k); };
  EXPECT_LT(at("optim.qk_clip_alpha"), at("optim.muon.adamw_lr"));
  EXPECT_LT(at("optim.muon.adjust_lr"), at("optim.adam_atan2.a"));
  EXPECT_LT(at("optim.adafactor.d"), at("optim.soap.shampoo_beta"));
  EXPECT_LT(at("optim.soap.correct_bias"), at("train.seed"));
}

TEST(OptionKeys, TomlTableJsonAndOverrideSetTheSameValue) {
  const Config from_toml =
      parse_config("[optim]\nname = \"muon\"\n[optim.muon]\nmomentum = 0.9\nns_steps = 3\n",
                   "cfg.toml");
  const Config from_override =
      load_config("", {"optim.name=muon", "optim.muon.momentum=0.9", "optim.muon.ns_steps=3"});
  EXPECT_EQ(from_toml, from_override);
  const MuonSettings m = MuonSettings::of(from_toml.optim);
  EXPECT_EQ(m.momentum, 0.9);
  EXPECT_EQ(m.ns_steps, 3);
  EXPECT_TRUE(m.nesterov);  // a key left out keeps its default

  const nlohmann::json j = config_to_json(from_toml);
  EXPECT_EQ(j["optim"]["muon"]["momentum"], 0.9);
  EXPECT_EQ(j["optim"]["name"], "muon");
  EXPECT_EQ(config_from_json(j), from_toml);
  const std::string dump = dump_config_toml(from_toml);
  EXPECT_NE(dump.find("\n[optim.muon]\nadamw_lr = 0.0\nmomentum = 0.9\n"), std::string::npos)
      << dump;
  EXPECT_EQ(parse_config(dump, "dump.toml"), from_toml);
}

// Configs and checkpoints written before the sections hold the flat names: they read as the keys
// they became, from TOML, JSON (a checkpoint's metadata) and overrides alike.
TEST(OptionKeys, EarlierFlatNamesStillRead) {
  Config want;
  set_key(want, "optim.muon.momentum", "0.9");
  set_key(want, "optim.soap.shampoo_beta", "0.5");
  set_key(want, "optim.adam_atan2.b", "2");
  EXPECT_EQ(parse_config("[optim]\nmomentum = 0.9\nsoap_shampoo_beta = 0.5\natan2_b = 2.0\n",
                         "old.toml"),
            want);
  EXPECT_EQ(config_from_json(nlohmann::json{
                {"optim", {{"momentum", 0.9}, {"soap_shampoo_beta", 0.5}, {"atan2_b", 2.0}}}}),
            want);
  EXPECT_EQ(load_config("", {"optim.momentum=0.9", "optim.soap_shampoo_beta=0.5",
                             "optim.atan2_b=2"}),
            want);
  // Written back under the new names only.
  const std::string dump = dump_config_toml(want);
  EXPECT_EQ(dump.find("soap_shampoo_beta"), std::string::npos) << dump;
  EXPECT_NE(dump.find("[optim.soap]\nshampoo_beta = 0.5\n"), std::string::npos) << dump;
}

TEST(OptionKeys, ProblemsNameTheKey) {
  // The key's own range, under its new name, where it was set.
  EXPECT_TRUE(has_problem(parse_problems("[optim.soap]\nshampoo_beta = 1.5\n"),
                          "cfg.toml:2: optim.soap.shampoo_beta = 1.5 must be < 1 (< 0: "
                          "optim.beta2)"));
  EXPECT_TRUE(has_problem(parse_problems("", {"optim.muon.ns_steps=0"}),
                          "--set 'optim.muon.ns_steps=0': optim.muon.ns_steps = 0 must be > 0"));
  // A wrong type.
  EXPECT_TRUE(has_problem(parse_problems("[optim.muon]\nnesterov = 1\n"),
                          "optim.muon.nesterov: expected a boolean (true or false), got 1"));
  EXPECT_TRUE(has_problem(parse_problems("[optim.muon]\nadjust_lr = \"rms\"\n"),
                          "optim.muon.adjust_lr: unknown value \"rms\" (allowed: original, "
                          "match_rms_adamw)"));
  // Unknown keys and sections, with the nearest names.
  EXPECT_TRUE(has_problem(parse_problems("[optim.soap]\nshampo_beta = 0.9\n"),
                          "unknown key 'optim.soap.shampo_beta' (did you mean "
                          "'optim.soap.shampoo_beta'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optim.sooap]\nshampoo_beta = 0.9\n"),
                          "unknown section 'optim.sooap' (did you mean 'optim.soap'?)"));
  EXPECT_TRUE(has_problem(parse_problems("", {"optim.shampoo_beta=0.9"}),
                          "unknown key 'optim.shampoo_beta' (did you mean "
                          "'optim.soap.shampoo_beta'?)"));
  EXPECT_TRUE(has_problem(parse_problems("[optim]\nsoap = 3\n"),
                          "'optim.soap' must be a table of keys ([optim.soap]), got an integer"));
  EXPECT_TRUE(has_problem(
      problems_of([] { config_from_json(nlohmann::json{{"optim", {{"soap", 3}}}}); }),
      "'optim.soap' must be an object of keys, got number"));
  // set_key leaves the config as it was on a bad value.
  Config c;
  EXPECT_THROW(set_key(c, "optim.soap.max_precond_dim", "many"), ConfigError);
  EXPECT_EQ(c, Config{});
}

// OptimConfig::settings holds only values that differ from the default, so equal settings compare
// equal however they were reached; an entry no optimizer declares is refused by validation.
TEST(OptionKeys, SettingsHoldOnlyChangedValues) {
  Config c;
  set_key(c, "optim.soap.precondition_frequency", "10");  // the default
  EXPECT_TRUE(c.optim.settings.empty());
  EXPECT_EQ(c, Config{});
  set_key(c, "optim.soap.precondition_frequency", "4");
  ASSERT_EQ(c.optim.settings.size(), 1u);
  EXPECT_EQ(std::get<std::int64_t>(c.optim.settings.at("soap.precondition_frequency")), 4);
  c.optim.settings["muon.adjust_lr"] = std::string("sideways");  // written directly: refused
  c.optim.settings["muon.ns_steps"] = 2.5;
  EXPECT_TRUE(has_problem(validation_errors(c), "optim.muon.adjust_lr = sideways is not one of "
                                                "original, match_rms_adamw"));
  EXPECT_TRUE(has_problem(validation_errors(c), "optim.muon.ns_steps = 2.5 is not an integer"));
  EXPECT_EQ(MuonSettings::of(c.optim).adjust_lr, MuonAdjustLr::original);  // not read
  c.optim.settings["soap.bogus"] = 1.0;
  EXPECT_TRUE(has_problem(validation_errors(c), "optim.settings holds 'soap.bogus', which is no "
                                                "optimizer's key"));
}

// A key of one optimizer's section may change on resume or not, by its own rule.
TEST(OptionKeys, ResumeRulesAreTheKeys) {
  Config saved, next;
  set_key(next, "optim.muon.ns_steps", "7");
  EXPECT_NO_THROW(check_resume_config(saved, next));
  set_key(next, "optim.muon.momentum", "0.8");
  const auto p = problems_of([&] { check_resume_config(saved, next); });
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0], "optim.muon.momentum cannot change on resume: it changes the meaning of the "
                  "saved optimizer moments (saved 0.95, given 0.8)");
}

}  // namespace
}  // namespace normlab
