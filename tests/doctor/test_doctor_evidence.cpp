// doctor on synthetic records: remedies as data (the config changes, tried when the run already
// has them, never advised again: #49's DyT case), the statistic each problem names, and missing
// evidence (#48): a check whose fields are null, absent or named by a `missing` event is "not
// checked" with the event's reason; a run with lost evidence, or with no check performed, is "not
// judged", never healthy; a null loss or gradient norm is never a non-finite step; keys listed in
// source.unknown carry no remedy; a PyTorch run's remedies are phrased for its own code.
#include <gtest/gtest.h>

#include <functional>

#include "doctor/doctor.h"
#include "doctor/doctor_fixtures.h"
#include "fixtures.h"
#include "normlab/metrics.h"

// Its own namespace: the unity build puts it in one translation unit with the other doctor tests.
namespace normlab::doctor_evidence_test {
namespace {

using doctor_test::any_contains;
using doctor_test::find;
using doctor_test::remedy_setting;
using json = nlohmann::json;
using Sets = std::vector<std::pair<std::string, std::string>>;

// 40 logged steps of a healthy run with every statistic doctor reads, then `edit`.
std::vector<json> records(const std::function<void(long, json&)>& edit = {}) {
  std::vector<json> out;
  for (long s = 1; s <= 40; ++s) {
    json r = {{metric::step, s},
              {metric::loss, 5.5 - 3.0 * (1.0 - std::exp(-s / 10.0))},
              {metric::grad_norm, 0.5},
              {metric::log_z_mean, 5.5 + 0.01 * s},
              {metric::rms_g2v_max, 0.9},
              {metric::update_rms, {{"attention", 1e-3}, {"mlp", 1e-3}}},
              {metric::attn_max_logit, json::array({3.0, 4.0})},
              {metric::resid_rms, json::array({1.0, 1.0, 1.0, 1.0, 1.0})}};
    if (edit) edit(s, r);
    out.push_back(r);
  }
  out.push_back({{metric::event, "end"}, {metric::step, 40}, {metric::reason, "done"},
                 {metric::train_loss, 2.6}, {metric::train_loss_steps, 20}});
  return out;
}

Config config() {
  Config c = test::tiny_run(40);
  c.optim.lr = 3e-3;
  return c;
}

Diagnosis diagnose(const std::vector<json>& recs, const Config& c = config()) {
  return diagnose_records(recs, c, true, 3.0);
}

// The attention logit of layer 1 grows past 200 from step 20 on.
void logit_growth(long s, json& r) {
  if (s >= 20) r[metric::attn_max_logit] = json::array({3.0, 10.0 * s});
}

TEST(DoctorEvidence, AHealthyRunWithEveryStatisticIsHealthy) {
  const Diagnosis d = diagnose(records());
  EXPECT_TRUE(d.healthy()) << d.verdict();
  EXPECT_TRUE(d.not_checked.empty()) << d.not_checked.front().check;
  EXPECT_EQ(d.verdict().rfind("healthy", 0), 0u) << d.verdict();
}

TEST(DoctorEvidence, RemediesAreConfigChangesAndTheStatisticIsNamed) {
  const Diagnosis d = diagnose(records(logit_growth));
  const DoctorFinding* f = find(d, "attention_logit_growth");
  ASSERT_NE(f, nullptr) << d.verdict();
  const Remedy* qk = remedy_setting(*f, "model.qk_norm");
  ASSERT_NE(qk, nullptr);
  EXPECT_EQ(qk->set.front().second, "rmsnorm");
  EXPECT_FALSE(qk->tried);
  const Remedy* lr = remedy_setting(*f, "optim.lr");
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->set.front().second, "0.001");  // a third of 3e-3
  const json& st = f->values["statistic"];
  EXPECT_EQ(st["name"], "attn_max_logit");
  EXPECT_DOUBLE_EQ(st["value"].get<double>(), 400.0);
  EXPECT_DOUBLE_EQ(st["threshold"].get<double>(), DoctorThresholds::kAttnLogit);
  EXPECT_EQ(st["onset_step"], 20);
  const json j = to_json(d);
  const json& r0 = j["findings"][0]["remedies"];
  ASSERT_TRUE(r0.is_array());
  bool qk_json = false;
  for (const json& m : r0) {
    ASSERT_TRUE(m.contains("text") && m.contains("set") && m.contains("tried"));
    qk_json |= m["set"].value("model.qk_norm", "") == "rmsnorm";
  }
  EXPECT_TRUE(qk_json) << r0.dump();
}

TEST(DoctorEvidence, ARemedyTheRunHasIsTriedNotAdvisedAgain) {
  Config c = config();
  c.model.qk_norm = QKNormKind::layernorm;
  const Diagnosis d = diagnose(records(logit_growth), c);
  const DoctorFinding* f = find(d, "attention_logit_growth");
  ASSERT_NE(f, nullptr) << d.verdict();
  const Remedy* qk = remedy_setting(*f, "model.qk_norm");
  ASSERT_NE(qk, nullptr);
  EXPECT_TRUE(qk->tried);
  EXPECT_EQ(qk->set.front().second, "layernorm");
  EXPECT_NE(qk->text.find("model.qk_norm = layernorm: the run already has it"), std::string::npos)
      << qk->text;
  EXPECT_NE(qk->text.find("attention-logit growth: max attention logit 400"), std::string::npos)
      << qk->text;
  EXPECT_FALSE(any_contains(f->remedies, "QK-Norm:"));  // not advised
  EXPECT_TRUE(any_contains(f->remedies, "lower the learning rate"));
}

// #49, #50: a DyT run stalled saturated is advised finding 13's recipe that keeps DyT first, with
// its values (every weight at std 0.2, the embedding included), RMSNorm second; a run that has
// both (the embedding through embed_init_std, or init_std when it is 0) is not advised it again,
// and one with only the blocks or only the embedding at 0.2 is.
TEST(DoctorEvidence, DytIsAdvisedTheInitStdWithTheEmbeddingOnceAndRmsNormAfter) {
  Config c = config();
  c.model.norm = NormKind::dyt;
  const auto recs = records([](long s, json& r) {
    if (s % 5 == 0)
      r[metric::dyt_saturated] = {{"blocks.1.mlp.norm_in", s >= 20 ? 0.8 : 0.1},
                                  {"final_norm", 0.05}};
  });
  struct Case {
    double init, emb;
    bool tried;
    Sets set;
    const char* now;
  };
  const Sets recipe{{"model.init_std", "0.2"}, {"model.embed_init_std", "0.2"}};
  for (const Case& k : {Case{0.02, 0.0, false, recipe, "(now 0.02 and 0.02)"},
                        Case{0.2, 0.02, false, recipe, "(now 0.2 and 0.02)"},
                        Case{0.02, 0.2, false, recipe, "(now 0.02 and 0.2)"},
                        Case{0.2, 0.0, true, {{"model.init_std", "0.2"},
                                              {"model.embed_init_std", "0"}}, ""},
                        Case{0.3, 0.2, true, {{"model.init_std", "0.3"},
                                              {"model.embed_init_std", "0.2"}}, ""}}) {
    c.model.init_std = k.init;
    c.model.embed_init_std = k.emb;
    const Diagnosis d = diagnose(recs, c);
    const DoctorFinding* f = find(d, "dyt_saturation");
    ASSERT_NE(f, nullptr) << d.verdict();
    ASSERT_GE(f->remedies.size(), 2u);
    const std::string at = std::to_string(k.init) + " " + std::to_string(k.emb);
    EXPECT_EQ(f->remedies[0].set, k.set) << at;
    EXPECT_EQ(f->remedies[0].tried, k.tried) << at << ": " << f->remedies[0].text;
    if (!k.tried) {
      EXPECT_NE(f->remedies[0].text.find("--set model.init_std=0.2 --set model.embed_init_std=0.2 "
                                         + std::string(k.now)),
                std::string::npos)
          << f->remedies[0].text;
    }
    EXPECT_EQ(any_contains(f->remedies, "--set model.init_std"), !k.tried) << at;
    EXPECT_EQ(f->remedies[1].set, (Sets{{"model.norm", "rmsnorm"}}));
    EXPECT_FALSE(f->remedies[1].tried);
    EXPECT_EQ(f->values["statistic"]["name"], "dyt_saturated");
    EXPECT_EQ(f->values["statistic"]["onset_step"], 20);
  }
}

// #48: forward statistics null from step 5 on, with the probe's `missing` event.
TEST(DoctorEvidence, StatisticsMissingFromStep5AreNotCheckedAndTheRunIsNotJudged) {
  const char* reason =
      "forward statistics missing from step 5 on: the model was compiled after the probe "
      "attached (torch.compile)";
  auto recs = records([](long s, json& r) {
    if (s >= 5) {
      r[metric::attn_max_logit] = json::array({nullptr, nullptr});
      r[metric::resid_rms] = nullptr;
      r[metric::log_z_mean] = nullptr;
    }
  });
  recs.insert(recs.begin() + 4,
              json{{"event", "missing"},
                   {"step", 5},
                   {"fields", {"attn_max_logit", "resid_rms", "log_z_mean", "max_logit_raw"}},
                   {"reason", reason}});
  recs.insert(recs.begin(), json{{"event", "some_future_kind"}, {"step", 1}});  // ignored
  const Diagnosis d = diagnose(recs);
  EXPECT_FALSE(d.healthy());
  EXPECT_EQ(d.verdict().rfind("not judged: ", 0), 0u) << d.verdict();
  EXPECT_NE(d.verdict().find(reason), std::string::npos) << d.verdict();
  std::vector<std::string> names;
  for (const NotChecked& n : d.not_checked) {
    names.push_back(n.check);
    EXPECT_EQ(n.reason, reason) << n.check;
    EXPECT_TRUE(n.evidence_lost);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"attention-logit growth", "output-logit divergence",
                                             "residual-stream growth"}));
  const json j = to_json(d);
  ASSERT_EQ(j["not_checked"].size(), 3u);
  EXPECT_EQ(j["not_checked"][0]["check"], "attention-logit growth");
  EXPECT_EQ(j["not_checked"][0]["needs"], json::array({"attn_max_logit"}));
  EXPECT_EQ(j["not_checked"][0]["reason"], reason);
  EXPECT_FALSE(j["healthy"].get<bool>());
  // A problem the early records show still stands: evidence there was is evidence.
  auto early = recs;
  for (json& r : early)
    if (r.value(metric::step, 0L) == 4 && !r.contains("event"))
      r[metric::attn_max_logit] = json::array({3.0, 900.0});
  const Diagnosis e = diagnose(early);
  EXPECT_NE(find(e, "attention_logit_growth"), nullptr) << e.verdict();
}

TEST(DoctorEvidence, NoCheckPerformedIsNotJudged) {
  std::vector<json> recs;
  for (long s = 1; s <= 20; ++s) recs.push_back({{metric::step, s}, {metric::loss, nullptr}});
  recs.push_back({{metric::event, "end"}, {metric::step, 20}, {metric::reason, "done"}});
  const Diagnosis d = diagnose(recs);
  EXPECT_EQ(d.findings.size(), 0u) << d.findings.front().title;  // no divergence, no NaN step
  EXPECT_EQ(d.verdict().rfind("not judged: no check could be performed", 0), 0u) << d.verdict();
  EXPECT_FALSE(d.healthy());
}

TEST(DoctorEvidence, ANullGradientNormIsNotANonFiniteStep) {
  const Diagnosis d = diagnose(records([](long s, json& r) {
    if (s % 3 == 0) r[metric::grad_norm] = nullptr;
    if (s == 7) r[metric::loss] = nullptr;
  }));
  EXPECT_EQ(find(d, "nonfinite_steps"), nullptr) << d.verdict();
  EXPECT_EQ(find(d, "diverged"), nullptr) << d.verdict();
  EXPECT_TRUE(d.healthy()) << d.verdict();
}

// A loss spike at step 30 in a PyTorch run whose learning rate and warmup were not known.
TEST(DoctorEvidence, UnknownKeysCarryNoRemedyAndTorchRunsGetTorchWords) {
  Config c = config();
  c.source.kind = SourceKind::torch;
  c.source.unknown = {"optim.lr", "optim.warmup_steps"};
  const auto spike = [](long s, json& r) {
    if (s == 30) r[metric::loss] = 9.0;
    if (s >= 20) r[metric::log_z_mean] = 5.5 + 0.5 * (s - 19);  // log Z drifts away
  };
  const Diagnosis d = diagnose(records(spike), c);
  const DoctorFinding* f = find(d, "loss_spikes");
  ASSERT_NE(f, nullptr) << d.verdict();
  EXPECT_EQ(remedy_setting(*f, "optim.lr"), nullptr);  // no value to rest on
  EXPECT_TRUE(any_contains(f->remedies, "the run's own value is unknown"));
  EXPECT_FALSE(any_contains(f->remedies, "now 0.003"));
  const DoctorFinding* z = find(d, "output_logit_divergence");
  ASSERT_NE(z, nullptr) << d.verdict();
  EXPECT_TRUE(any_contains(z->remedies, "1e-4 * torch.logsumexp(logits, -1).pow(2).mean()"));
  EXPECT_EQ(remedy_setting(*z, "train.z_loss")->set.front().second, "1e-4");
  for (const DoctorFinding& x : d.findings) {
    for (const Remedy& m : x.remedies) EXPECT_EQ(m.text.find("--set"), std::string::npos) << m.text;
    for (const std::string& s : x.confirm) EXPECT_EQ(s.find("--set"), std::string::npos) << s;
  }
  // The same records from a normlab run: --set and the lr it had.
  const Diagnosis n = diagnose(records(spike));
  EXPECT_TRUE(any_contains(find(n, "loss_spikes")->remedies, "--set optim.lr=0.001 (now 0.003)"));
}

}  // namespace
}  // namespace normlab::doctor_evidence_test
