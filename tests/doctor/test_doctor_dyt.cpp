// doctor's DyT / Derf saturation check: a real DyT run whose residual stream outgrows its sites'
// alpha is named with the saturated sites, their alpha and input scale, and the remedies; a DyT
// run whose sites stay in tanh's working range is not; on records, one saturated diagnostics
// record (a transient) is not enough, two are, and the alpha key named matches the site.
#include <gtest/gtest.h>

#include <filesystem>

#include "doctor/doctor.h"
#include "doctor/doctor_fixtures.h"
#include "fixtures.h"
#include "normlab/metrics.h"
#include "normlab/trainer.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

using doctor_test::any_contains;
using doctor_test::find;
using json = nlohmann::json;

Config dyt_run(int steps, double lr) {
  Config c = test::tiny_run(steps);
  c.model.norm = NormKind::dyt;
  c.train.eval_batches = 1;
  c.train.checkpoint_interval = 1000;
  c.train.threads = 1;
  c.optim.lr = lr;
  c.optim.warmup_steps = 5;
  c.diag.interval = 5;
  return c;
}

Diagnosis train_and_diagnose_dyt(const Config& c, const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("normlab_doctor_dyt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Trainer(c, dir.string(), false).run({});
  Diagnosis d = diagnose_run(dir.string());
  fs::remove_all(dir);
  return d;
}

TEST(DoctorDyt, AGrowingResidualStreamSaturatesTheDytSites) {
  // Pre-Norm DyT at lr 0.03: within 25 steps the residual stream reaches an RMS of several units
  // while alpha stays near its initial 0.8 / 0.2, and the later sites' inputs saturate tanh.
  const Diagnosis d = train_and_diagnose_dyt(dyt_run(40, 0.03), "sat");
  const DoctorFinding* f = find(d, "dyt_saturation");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_EQ(f->severity, "problem");
  ASSERT_TRUE(f->values["sites"].is_object());
  EXPECT_FALSE(f->values["sites"].empty());
  for (const auto& [site, v] : f->values["sites"].items())
    EXPECT_GE(v.get<double>(), DoctorThresholds::kDytSaturated) << site;
  EXPECT_TRUE(any_contains(f->evidence, "alpha"));
  EXPECT_TRUE(any_contains(f->remedies, "model.norm=rmsnorm"));
  EXPECT_TRUE(any_contains(f->remedies, "--set model.init_std=0.2 --set model.embed_init_std=0.2"));
  EXPECT_TRUE(any_contains(f->evidence, "model.dyt_alpha_"));
}

TEST(DoctorDyt, SitesInTheWorkingRangeAreNotFlagged) {
  // At lr 1e-3 for 30 steps the residual stream stays near its initial 0.02 RMS.
  const Diagnosis d = train_and_diagnose_dyt(dyt_run(30, 1e-3), "ok");
  EXPECT_EQ(find(d, "dyt_saturation"), nullptr) << d.verdict();
  EXPECT_GT(d.diag_records, 0);
}

// 40 steps with diagnostics every 5; sites saturated (0.9) at the steps in `bad`.
std::vector<json> dyt_records(const std::vector<long>& bad, const std::string& site) {
  std::vector<json> out;
  for (long s = 1; s <= 40; ++s) {
    json r = {{metric::step, s}, {metric::loss, 3.0}, {metric::grad_norm, 0.5}, {metric::lr, 1e-3}};
    if (s % 5 == 0) {
      const bool b = std::find(bad.begin(), bad.end(), s) != bad.end();
      r[metric::dyt_saturated] = {{"blocks.0.attn.norm_in", 0.0}, {site, b ? 0.9 : 0.1}};
      r[metric::dyt_alpha] = {{"blocks.0.attn.norm_in", 0.8}, {site, 0.3}};
      r[metric::resid_rms] = json::array({0.1, 0.5, 1.0, 4.0, 9.0});
    }
    out.push_back(r);
  }
  out.push_back({{metric::event, "end"}, {metric::step, 40}, {metric::reason, "done"},
                 {metric::train_loss, 3.0}, {metric::train_loss_steps, 20}});
  return out;
}

Diagnosis diagnose_dyt(const std::vector<json>& recs) {
  Config c = test::tiny_run(40);
  c.model.norm = NormKind::dyt;
  c.model.n_layer = 2;
  return diagnose_records(recs, c, true, std::nullopt);
}

TEST(DoctorDyt, OneSaturatedRecordIsATransientTwoAreAFinding) {
  EXPECT_EQ(find(diagnose_dyt(dyt_records({20}, "blocks.1.mlp.norm_in")), "dyt_saturation"), nullptr);
  const Diagnosis d = diagnose_dyt(dyt_records({20, 30}, "blocks.1.mlp.norm_in"));
  const DoctorFinding* f = find(d, "dyt_saturation");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_EQ(f->first_step, 20);
  EXPECT_EQ(f->last_step, 30);
  // The site recovered by the last record (0.1): the finding shows step 30, names the MLP sites'
  // alpha key and the site's input, boundary 3 (after block 1's attention), RMS 4.
  EXPECT_EQ(f->values["step"], 30);
  EXPECT_TRUE(f->values["sites"].contains("blocks.1.mlp.norm_in"));
  EXPECT_FALSE(f->values["sites"].contains("blocks.0.attn.norm_in"));
  EXPECT_TRUE(any_contains(f->evidence, "model.dyt_alpha_mlp"));
  EXPECT_TRUE(any_contains(f->evidence, "input RMS 4"));
}

TEST(DoctorDyt, TheQkSitesNameTheQkAlpha) {
  const Diagnosis d = diagnose_dyt(dyt_records({10, 15, 20}, "blocks.1.attn.k_norm"));
  const DoctorFinding* f = find(d, "dyt_saturation");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_TRUE(any_contains(f->evidence, "model.dyt_alpha_qk"));
}

}  // namespace
}  // namespace normlab
