// The metrics schema: every field a run writes is listed (and explained) in metric_fields() and
// in docs/metrics.md, a step record survives to_json / step_record_from_json, non-finite values
// are written as null, metrics.csv has its documented columns, and time_s runs on across resumes.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fixtures.h"
#include "io/metrics.h"
#include "normlab/metrics.h"
#include "normlab/trainer.h"
#include "normlab/config_file.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

std::set<std::string> documented() {
  std::set<std::string> keys;
  for (const MetricField& f : metric_fields()) {
    EXPECT_FALSE(f.meaning.empty()) << f.key;
    EXPECT_TRUE(f.kind == "step" || f.kind == "diagnostic" || f.kind == "event") << f.key;
    EXPECT_TRUE(keys.insert(std::string(f.key)).second) << "listed twice: " << f.key;
  }
  return keys;
}

const fs::path kDoc = fs::path(NORMLAB_SOURCE_DIR) / "docs" / "metrics.md";

// The keys of the tables in docs/metrics.md's "## metrics.jsonl" section: the first cell of each
// table row, "| `key` | ...".
std::set<std::string> documented_in_doc() {
  std::ifstream in(kDoc);
  EXPECT_TRUE(in) << "cannot read " << kDoc;
  std::set<std::string> keys;
  std::string line;
  bool in_section = false;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) in_section = line == "## metrics.jsonl";
    if (!in_section || !line.starts_with("| `")) continue;
    const std::size_t end = line.find('`', 3);
    if (end == std::string::npos) continue;
    EXPECT_TRUE(keys.insert(line.substr(3, end - 3)).second) << "documented twice: " << line;
  }
  return keys;
}

// The cells of one CSV line.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

TEST(Metrics, EveryKeyARunWritesIsDocumented) {
  Config c = test::tiny_run(6);
  c.train.threads = 1;
  c.train.eval_interval = 3;
  c.train.eval_batches = 1;
  c.train.checkpoint_interval = 2;
  c.train.spike_policy = SpikePolicy::rollback;
  c.train.spike_window = 2;
  c.train.spike_threshold = 1.0;
  c.diag.interval = 2;
  c.diag.per_head = true;
  const fs::path dir = test::temp_dir("metrics");
  TrainHooks h;
  // A huge loss at the 4th step, once: a spike the rollback policy answers with an event record.
  bool injected = false;
  h.inject = [&](long step, std::span<float>, double& loss) {
    if (step == 3 && !injected) loss = 1e6, injected = true;
  };
  Trainer(c, dir.string(), false).run(h);
  std::vector<nlohmann::json> records = read_metrics(dir.string());
  // And a run without spikes, whose diagnostics steps update (update_ratio).
  c.train.spike_policy = Config{}.train.spike_policy;
  c.train.spike_threshold = Config{}.train.spike_threshold;
  fs::remove_all(dir);
  Trainer(c, dir.string(), false).run({});
  for (auto& rec : read_metrics(dir.string())) records.push_back(std::move(rec));
  // And Muon with QK-Clip at a threshold every head exceeds (qk_clip_*; rms_g2v of its AdamW group).
  c.optim.name = OptimizerKind::muon;
  c.optim.qk_clip = 1e-3;
  fs::remove_all(dir);
  Trainer(c, dir.string(), false).run({});
  for (auto& rec : read_metrics(dir.string())) records.push_back(std::move(rec));
  // And DyT / Derf sites (dyt_alpha, dyt_saturated), with a gate and a learned sink
  // (attn_sink_mass).
  c.model.norm = NormKind::dyt;
  c.model.qk_norm = QKNormKind::derf;
  c.model.attn_gate = AttnGate::head;
  set_key(c, "model.attn_sink", "learned");
  fs::remove_all(dir);
  Trainer(c, dir.string(), false).run({});
  for (auto& rec : read_metrics(dir.string())) records.push_back(std::move(rec));
  // And σReparam (sigma_w, sigma_gamma), without QK-Clip (which it warns about).
  c.model.sigma_reparam = true;
  c.optim.qk_clip = 0;
  fs::remove_all(dir);
  Trainer(c, dir.string(), false).run({});
  for (auto& rec : read_metrics(dir.string())) records.push_back(std::move(rec));
  // And nGPT (ngpt_alpha: its eigen learning rates under their own key, never as dyt_alpha).
  Config n = test::tiny_run(6);
  n.train.threads = 1;
  n.diag.interval = 2;
  n.model.placement = Placement::ngpt;
  n.model.mlp = MlpKind::swiglu;
  fs::remove_all(dir);
  Trainer(n, dir.string(), false).run({});
  bool saw_ngpt = false;
  for (auto& rec : read_metrics(dir.string())) {
    EXPECT_FALSE(rec.contains(metric::dyt_alpha)) << "nGPT's alpha as DyT's: " << rec.dump();
    EXPECT_FALSE(rec.contains(metric::dyt_saturated)) << rec.dump();
    if (rec.contains(metric::ngpt_alpha)) {
      saw_ngpt = true;
      const auto& a = rec[metric::ngpt_alpha];
      EXPECT_EQ(a.size(), 4u) << a.dump();  // 2 layers x (attn, mlp)
      for (const char* site : {"blocks.0.attn", "blocks.0.mlp", "blocks.1.attn", "blocks.1.mlp"}) {
        ASSERT_TRUE(a.contains(site) && a[site].is_number()) << site << " in " << a.dump();
        // the effective eigen learning rate: near its initial model.ngpt_alpha_init after 6 steps
        EXPECT_NEAR(a[site].get<double>(), n.model.ngpt_alpha_init, 0.5 * n.model.ngpt_alpha_init)
            << site;
      }
    }
    records.push_back(std::move(rec));
  }
  EXPECT_TRUE(saw_ngpt);
  const std::set<std::string> keys = documented();
  const std::set<std::string> doc = documented_in_doc();
  bool saw_diag = false, saw_event = false, saw_update_ratio = false, saw_val = false, saw_end = false;
  bool saw_clip = false, saw_g2v = false, saw_dyt = false, saw_sink = false, saw_sigma = false;
  for (const auto& rec : records) {
    for (const auto& [k, v] : rec.items()) {
      EXPECT_TRUE(keys.contains(k)) << "key " << k << " is not in metric_fields()";
      EXPECT_TRUE(doc.contains(k)) << "key " << k << " is not documented in " << kDoc;
    }
    saw_diag |= rec.contains(metric::attn_max_logit_head);
    saw_update_ratio |= rec.contains(metric::update_ratio);
    saw_val |= rec.contains(metric::val_loss);
    saw_event |= rec.contains(metric::event);
    saw_end |= rec.value(metric::event, "") == "end";
    saw_clip |= rec.value(metric::qk_clip_heads, 0) > 0;
    saw_g2v |= rec.contains(metric::rms_g2v_max_tensor);
    saw_dyt |= rec.contains(metric::dyt_alpha) && rec.contains(metric::dyt_saturated);
    saw_sink |= rec.contains(metric::attn_sink_mass) && rec.contains(metric::attn_first_mass);
    saw_sigma |= rec.contains(metric::sigma_w) && rec.contains(metric::sigma_gamma);
  }
  EXPECT_TRUE(saw_sink);
  EXPECT_TRUE(saw_sigma);
  EXPECT_TRUE(saw_dyt);
  EXPECT_TRUE(saw_clip);
  EXPECT_TRUE(saw_g2v);
  EXPECT_TRUE(saw_diag);
  EXPECT_TRUE(saw_update_ratio);
  EXPECT_TRUE(saw_val);
  EXPECT_TRUE(saw_event);
  EXPECT_TRUE(saw_end);
  // The doc and the schema list the same keys.
  for (const auto& k : doc) EXPECT_TRUE(keys.contains(k)) << kDoc << " documents " << k << ", not in metric_fields()";
  for (const auto& k : keys) EXPECT_TRUE(doc.contains(k)) << k << " is not documented in " << kDoc;
  fs::remove_all(dir);
}

TEST(Metrics, CsvColumnsAreDocumentedAndStable) {
  const char* const* cols = MetricsWriter::csv_columns();
  std::vector<std::string> names;
  for (int i = 0; cols[i]; ++i) names.emplace_back(cols[i]);
  // The first nine are the original columns, in their order; new ones are appended.
  EXPECT_EQ(names, (std::vector<std::string>{"step", "tokens", "loss", "ce", "z_loss", "lr", "grad_norm",
                                             "tokens_per_s", "val_loss", "log_z_mean", "time_s"}));
  // docs/metrics.md lists them in the same order: "| 1 | `step` |".
  std::vector<std::string> doc;
  for (const auto& line : lines_of(kDoc))
    if (line.starts_with("| ") && line.size() > 2 && std::isdigit(static_cast<unsigned char>(line[2]))) {
      const std::size_t a = line.find('`'), b = line.find('`', a + 1);
      ASSERT_NE(b, std::string::npos) << line;
      doc.push_back(line.substr(a + 1, b - a - 1));
    }
  EXPECT_EQ(doc, names);

  Config c = test::tiny_run(4);
  c.train.threads = 1;
  c.train.eval_interval = 2;
  c.train.eval_batches = 1;
  const fs::path dir = test::temp_dir("metrics_csv");
  Trainer(c, dir.string(), false).run({});
  const auto csv = lines_of(dir / "metrics.csv");
  std::vector<nlohmann::json> jsonl;  // the step lines (event lines have no row)
  for (auto& rec : read_metrics(dir.string()))
    if (!rec.contains(metric::event)) jsonl.push_back(std::move(rec));
  ASSERT_EQ(csv.size(), 1 + jsonl.size());  // a header, then one row per step line
  EXPECT_EQ(cells(csv[0]), names);
  for (std::size_t i = 0; i < jsonl.size(); ++i) {
    const auto row = cells(csv[i + 1]);
    ASSERT_EQ(row.size(), names.size()) << csv[i + 1];
    EXPECT_EQ(std::stol(row[0]), jsonl[i].at(metric::step).get<long>());
    EXPECT_DOUBLE_EQ(std::stod(row[9]), jsonl[i].at(metric::log_z_mean).get<double>());
    EXPECT_DOUBLE_EQ(std::stod(row[10]), jsonl[i].at(metric::time_s).get<double>());
    EXPECT_EQ(row[8].empty(), !jsonl[i].contains(metric::val_loss)) << csv[i + 1];
  }
  fs::remove_all(dir);
}

TEST(Metrics, TimeRunsOnAcrossResume) {
  Config c = test::tiny_run(4);
  c.train.threads = 1;
  const fs::path dir = test::temp_dir("metrics_time");
  // The first process takes at least 0.3 s for its two steps, then stops (and checkpoints) after
  // step 2.
  TrainHooks first;
  first.inject = [](long, std::span<float>, double&) { std::this_thread::sleep_for(std::chrono::milliseconds(150)); };
  long steps_done = 0;
  first.on_log = [&](const StepRecord& r) { steps_done = r.step; };
  first.stop_requested = [&] { return steps_done >= 2; };
  Trainer(c, dir.string(), false).run(first);
  std::vector<nlohmann::json> before;  // the step lines
  for (auto& rec : read_metrics(dir.string()))
    if (!rec.contains(metric::event)) before.push_back(std::move(rec));
  ASSERT_EQ(before.size(), 2u);
  const double t2 = before[1].at(metric::time_s).get<double>();
  EXPECT_GE(t2, 0.3);
  EXPECT_GT(t2, before[0].at(metric::time_s).get<double>());
  Trainer(c, dir.string(), true).run({});  // fast steps: without the saved time, time_s < 0.3
  double prev = 0;
  std::vector<long> steps;
  for (const auto& rec : read_metrics(dir.string())) {
    if (rec.contains(metric::event)) continue;
    const double t = rec.at(metric::time_s).get<double>();
    EXPECT_GT(t, prev) << "time_s goes back at step " << rec.at(metric::step);
    prev = t;
    steps.push_back(rec.at(metric::step).get<long>());
  }
  EXPECT_EQ(steps, (std::vector<long>{1, 2, 3, 4}));
  EXPECT_GE(prev, t2);
  fs::remove_all(dir);
}

TEST(Metrics, StepRecordRoundTrips) {
  StepRecord r;
  r.step = 7;
  r.tokens = 4096;
  r.loss = 2.5;
  r.ce = 2.25;
  r.z_loss = 0.25;
  r.lse_mean = 1.5;
  r.lr = 3e-4;
  r.grad_norm = std::nan("");
  r.tokens_per_s = 1234.5;
  r.val_loss = 2.75;
  r.skipped = true;
  r.nonfinite = true;
  r.skipped_total = 3;
  r.diag[metric::resid_rms] = {1.0, 2.0};
  const nlohmann::json j = to_json(r);
  EXPECT_TRUE(j.at(metric::grad_norm).is_null());  // non-finite written as null
  const StepRecord b = step_record_from_json(j);
  EXPECT_EQ(b.step, 7);
  EXPECT_EQ(b.tokens, 4096);
  EXPECT_EQ(b.loss, 2.5);
  EXPECT_EQ(b.ce, 2.25);
  EXPECT_EQ(b.z_loss, 0.25);
  EXPECT_EQ(b.lse_mean, 1.5);
  EXPECT_EQ(b.lr, 3e-4);
  EXPECT_TRUE(std::isnan(b.grad_norm));
  EXPECT_EQ(b.tokens_per_s, 1234.5);
  ASSERT_TRUE(b.val_loss.has_value());
  EXPECT_EQ(*b.val_loss, 2.75);
  EXPECT_TRUE(b.skipped);
  EXPECT_FALSE(b.spike);
  EXPECT_TRUE(b.nonfinite);
  EXPECT_EQ(b.skipped_total, 3);
  EXPECT_FALSE(b.comm_ms_per_step.has_value());
  EXPECT_EQ(b.diag.at(metric::resid_rms), r.diag.at(metric::resid_rms));
  EXPECT_EQ(to_json(b), j);
}

// Step lines as `normlab train` writes them: loss 10 - step, val loss every 5 steps.
std::vector<nlohmann::json> step_lines(long from, long to) {
  std::vector<nlohmann::json> m;
  for (long s = from; s <= to; ++s) {
    StepRecord r;
    r.step = s;
    r.loss = 10.0 - static_cast<double>(s);
    if (s % 5 == 0) r.val_loss = 20.0 - static_cast<double>(s);
    m.push_back(to_json(r));
  }
  return m;
}

TEST(Metrics, RunEndRoundTripsAndTheLastEndEventWins) {
  RunEnd e;
  e.step = 7;
  e.reason = "diverged";
  e.detail = "why";
  e.train_loss = 2.5;
  e.train_loss_steps = 7;
  e.val_loss = 3.5;
  e.tokens_per_s = 1000;
  e.wall_s = 1.5;
  const nlohmann::json j = to_json(e);
  EXPECT_EQ(j.at(metric::event), "end");
  const RunEnd back = run_end_from_json(j);
  EXPECT_EQ(back.step, 7);
  EXPECT_EQ(back.reason, "diverged");
  EXPECT_EQ(back.detail, "why");
  EXPECT_EQ(back.train_loss, 2.5);
  EXPECT_EQ(back.train_loss_steps, 7);
  EXPECT_EQ(back.val_loss, 3.5);
  EXPECT_EQ(back.wall_s, 1.5);
  RunEnd none;  // no train loss, no val loss: nulls, read back as nothing
  none.train_loss = NAN;
  const nlohmann::json jn = to_json(none);
  EXPECT_TRUE(jn.at(metric::train_loss).is_null());
  EXPECT_FALSE(run_end_from_json(jn).train_loss);
  EXPECT_FALSE(run_end_from_json(jn).val_loss);

  auto m = step_lines(1, 7);
  m.push_back(j);
  RunEnd later = e;
  later.reason = "done";
  m.push_back(to_json(later));
  const auto got = run_end_of(m);
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->from_event);
  EXPECT_EQ(got->reason, "done");
}

TEST(Metrics, RunEndFallsBackToTheStepLines) {
  // No end event (an older run): the last step, the mean loss of the logged steps among the last
  // 20, the last val loss.
  auto m = step_lines(1, 30);
  const auto e = run_end_of(m);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->from_event);
  EXPECT_EQ(e->reason, "");
  EXPECT_EQ(e->step, 30);
  EXPECT_EQ(e->train_loss_steps, 20);
  EXPECT_DOUBLE_EQ(*e->train_loss, 10.0 - (11 + 30) / 2.0);  // steps 11..30
  EXPECT_EQ(e->val_loss, 20.0 - 30);
  // Steps written after the last end event (a resumed process that never ended): the steps win.
  RunEnd old;
  old.step = 10;
  old.reason = "interrupted";
  auto resumed = step_lines(1, 10);
  resumed.push_back(to_json(old));
  for (const auto& r : step_lines(11, 12)) resumed.push_back(r);
  const auto r = run_end_of(resumed);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->from_event);
  EXPECT_EQ(r->step, 12);
  EXPECT_FALSE(run_end_of({}));
}

TEST(Metrics, EndEventsStayOutOfTheCsvAndAResumeDropsThem) {
  const fs::path dir = test::temp_dir("metrics_end");
  {
    MetricsWriter w(dir.string());
    for (const auto& r : step_lines(1, 4)) w.write(r);
    RunEnd e;
    e.step = 4;
    e.reason = "interrupted";
    w.write(to_json(e));
  }
  std::ifstream csv(dir / "metrics.csv");
  long rows = 0;
  for (std::string line; std::getline(csv, line);) ++rows;
  EXPECT_EQ(rows, 1 + 4);  // header and the steps
  ASSERT_EQ(read_metrics(dir.string()).size(), 5u);
  EXPECT_EQ(run_end_of(read_metrics(dir.string()))->reason, "interrupted");
  { MetricsWriter resumed(dir.string(), 4); }
  const auto m = read_metrics(dir.string());
  ASSERT_EQ(m.size(), 4u);
  EXPECT_FALSE(m.back().contains(metric::event));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
