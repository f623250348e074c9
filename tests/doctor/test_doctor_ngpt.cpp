// doctor on an nGPT run (model.placement = ngpt): its residual stream is on the unit sphere by
// construction, so residual-stream growth, and its "Peri-Norm" remedy, is never reported for it,
// while the same records from a Pre-Norm run are.
#include <gtest/gtest.h>

#include "doctor/doctor.h"
#include "doctor/doctor_fixtures.h"
#include "fixtures.h"
#include "normlab/metrics.h"

namespace normlab {
namespace {

using doctor_test::any_contains;
using doctor_test::find;
using json = nlohmann::json;

// 30 healthy steps whose diagnostics show a residual RMS far past doctor's threshold.
std::vector<json> ngpt_grown_stream() {
  std::vector<json> out;
  for (long s = 1; s <= 30; ++s)
    out.push_back({{metric::step, s},
                   {metric::loss, 5.5 - 3.0 * (1.0 - std::exp(-s / 10.0))},
                   {metric::grad_norm, 0.5},
                   {metric::lr, 1e-3},
                   {metric::resid_rms, json::array({1.0, 5.0, 50.0, 200.0, 400.0})},
                   {metric::resid_max, json::array({3.0, 15.0, 150.0, 600.0, 1200.0})}});
  out.push_back({{metric::event, "end"}, {metric::step, 30}, {metric::reason, "done"},
                 {metric::train_loss, 2.6}, {metric::train_loss_steps, 20}});
  return out;
}

Diagnosis diagnose_grown(Placement p) {
  Config c = test::tiny_run(30);
  c.model.placement = p;
  if (p == Placement::ngpt) c.model.mlp = MlpKind::swiglu;
  return diagnose_records(ngpt_grown_stream(), c, true, std::nullopt);
}

TEST(DoctorNgpt, PreNormGetsResidualGrowthWithThePeriNormRemedy) {
  const Diagnosis d = diagnose_grown(Placement::pre);
  const DoctorFinding* f = find(d, "residual_growth");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_TRUE(any_contains(f->remedies, "model.placement=peri"));
}

TEST(DoctorNgpt, NgptGetsNoResidualGrowthAdvice) {
  const Diagnosis d = diagnose_grown(Placement::ngpt);
  EXPECT_EQ(find(d, "residual_growth"), nullptr) << d.verdict();
  for (const DoctorFinding& f : d.findings)
    EXPECT_FALSE(any_contains(f.remedies, "model.placement=peri")) << f.kind;
}

}  // namespace
}  // namespace normlab
