// The report builder on in-memory inputs: series labelled by what differs among the runs of each
// chart, figures left out (and said so) when no input has their data, diverged runs marked where
// they stopped with the reason, smoothed training curves, the runs table's steps and losses.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "report/figures.h"
#include "report/report.h"

namespace normlab::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

RunInput run(const std::string& name, const std::string& placement, double lr, bool diag, bool diverge = false,
             int last_step = 50) {
  RunInput r;
  r.name = name;
  r.dir = "runs/" + name;
  r.config = parse_config("", "test", {"model.placement=" + placement, fmt::format("optim.lr={}", lr),
                                       "model.n_layer=2"});
  for (int step = 10; step <= last_step; step += 10) {
    nlohmann::json rec = {{"step", step}, {"tokens", step * 100}, {"loss", 5.0 - step / 20.0}, {"lr", lr},
                          {"grad_norm", 1.0}, {"log_z_mean", 4.0}};
    if (diverge && step == last_step) rec["loss"] = nullptr;
    if (diag) {
      rec["grad_norm_block"] = {0.1, 0.2};
      rec["resid_rms"] = {1.0, 1.5, 2.0, 2.5, 3.0};
      rec["attn_max_logit"] = {3.0, nullptr};
    }
    r.metrics.push_back(rec);
  }
  r.status = diverge ? "diverged" : "done";
  return r;
}

const Figure* find(const Report& rep, const std::string& name) {
  for (const auto& f : rep.figures)
    if (f.name == name) return &f;
  return nullptr;
}

TEST(Report, LabelsFromConfigDifferences) {
  ReportInputs in;
  in.runs = {run("a", "post", 1e-3, true), run("b", "peri", 3e-3, true), run("c", "peri", 1e-3, true, true)};
  const Report rep = build_report(in, "T", "r_figures");
  const Figure* loss = find(rep, "loss");
  ASSERT_NE(loss, nullptr);
  ASSERT_EQ(loss->chart.series.size(), 3u);
  EXPECT_EQ(loss->chart.series[0].label, "a (post, lr 1e-3)");  // the run's name first
  EXPECT_EQ(loss->chart.series[1].label, "b (peri, lr 3e-3)");
  // The diverged run (no end event: an older run) is marked at its last step line, at the top edge
  // since its loss there is not finite.
  ASSERT_EQ(loss->chart.series[2].marks.size(), 1u);
  EXPECT_DOUBLE_EQ(loss->chart.series[2].marks[0].x, 50);
  EXPECT_TRUE(std::isnan(loss->chart.series[2].marks[0].y));
  for (const char* name : {"grad_norm_layers_runs", "resid_rms_runs", "attn_max_logit", "log_z", "grad_norm"})
    EXPECT_NE(find(rep, name), nullptr) << name;
  // Lone runs with different learning rates make a learning-rate figure of their own.
  const Figure* lr = find(rep, "lr_sensitivity");
  ASSERT_NE(lr, nullptr);
  ASSERT_EQ(lr->chart.series.size(), 2u);  // post, peri: the learning rate is the x axis
  EXPECT_EQ(lr->chart.series[0].label, "post");
  EXPECT_EQ(lr->chart.series[1].label, "peri");
  EXPECT_EQ(lr->chart.y.label, "final train loss");  // no run was evaluated
  // resid_rms has 2L+1 values at depths 0, 0.5, ..., L.
  EXPECT_EQ(find(rep, "resid_rms_runs")->chart.series[0].x, (std::vector<double>{0, 0.5, 1, 1.5, 2}));
  EXPECT_NE(rep.html.find("<details"), std::string::npos);
  EXPECT_NE(rep.html.find("href=\"r_figures/loss.svg\""), std::string::npos);
  EXPECT_EQ(rep.html.find("http"), std::string::npos);
}

TEST(Report, MissingDataIsSaidNotDrawn) {
  ReportInputs in;
  in.runs = {run("only", "pre", 1e-3, false)};
  const Report rep = build_report(in, "T", "f");
  EXPECT_NE(find(rep, "loss"), nullptr);
  EXPECT_EQ(find(rep, "loss")->chart.series[0].label, "only");  // nothing differs: the name
  for (const char* name : {"lr_sensitivity", "grad_norm_layers_runs", "grad_norm_layers_gradflow",
                           "resid_rms_runs", "attn_max_logit"})
    EXPECT_EQ(find(rep, name), nullptr) << name;
  bool diag_reason = false;
  for (const auto& s : rep.not_shown) diag_reason = diag_reason || s.find("diag.interval") != std::string::npos;
  EXPECT_TRUE(diag_reason);
  EXPECT_NE(rep.html.find("id=\"not-shown\""), std::string::npos);

  const Report none = build_report(ReportInputs{}, "T", "f");
  EXPECT_TRUE(none.figures.empty());
  EXPECT_NE(none.html.find("No input holds data"), std::string::npos);
}

std::vector<std::string> legend(const Figure& f) {
  std::vector<std::string> out;
  for (const auto& s : f.chart.series)
    if (s.in_legend) out.push_back(s.label);
  return out;
}

TEST(Report, LabelsDifferWithinEachChart) {
  // A placement x learning-rate sweep: four runs; only the two post-norm runs have diagnostics.
  ReportInputs in;
  in.runs = {run("post_a", "post", 1e-3, true), run("post_b", "post", 1e-2, true),
             run("pre_a", "pre", 1e-3, false), run("pre_b", "pre", 1e-2, false)};
  const Report rep = build_report(in, "T", "f");
  // The loss chart holds all four: the run's name, then placement and learning rate, short.
  EXPECT_EQ(legend(*find(rep, "loss")),
            (std::vector<std::string>{"post_a (post, lr 1e-3)", "post_b (post, lr 0.01)",
                                      "pre_a (pre, lr 1e-3)", "pre_b (pre, lr 0.01)"}));
  // The diagnostics charts hold the post-norm runs only: within them only the learning rate differs.
  for (const char* name : {"grad_norm_layers_runs", "resid_rms_runs", "attn_max_logit"}) {
    const Figure* f = find(rep, name);
    ASSERT_NE(f, nullptr) << name;
    EXPECT_EQ(legend(*f), (std::vector<std::string>{"post_a (lr 1e-3)", "post_b (lr 0.01)"}))
        << name;
  }
  // The learning-rate chart: one line per placement.
  EXPECT_EQ(legend(*find(rep, "lr_sensitivity")), (std::vector<std::string>{"post", "pre"}));
  // Every chart's labels are distinct.
  for (const auto& f : rep.figures) {
    const auto l = legend(f);
    EXPECT_EQ(std::set<std::string>(l.begin(), l.end()).size(), l.size()) << f.name;
  }
}

// Two sweeps of different widths (qk_norm x lr each): the scaling figures put each variant's
// sensitivity and best learning rate at its non-embedding parameter count, one line per variant,
// and the attention-logit figure draws every run's last max logit against its learning rate.
TEST(Report, ScalingFiguresDrawSweepsAgainstNonEmbeddingParameters) {
  ReportInputs in;
  // Non-embedding parameters of 2 pre-norm blocks with d_ff = 4C and weight-only LayerNorms:
  // L (4 C^2 + 2 C F + 2 C) + C (final norm); QK-Norm (scope head) adds 2 head_dim gains a layer.
  const auto expected = [](double C, double H, bool qk) { return 2 * (12 * C * C + 2 * C) + C + (qk ? 2 * 2 * C / H : 0); };
  for (int C : {32, 64}) {
    SweepInput sw;
    sw.name = fmt::format("d{}", C);
    sw.dir = "sweeps/" + sw.name;
    for (const char* qk : {"none", "rmsnorm"}) {
      SensitivityRow row;
      row.variant = {{"model.qk_norm", qk}};
      row.label = std::string("qk_norm ") + qk;
      row.lrs = {1e-3, 1e-2};
      const bool none = std::string(qk) == "none";
      // The wider model without QK-Norm is the more sensitive, and diverges at the higher rate.
      row.final_losses = {2.0, none && C == 64 ? kNaN : 1.5};
      row.sensitivity = none ? (C == 64 ? 0.8 : 0.3) : 0.1;
      row.best_loss = none && C == 64 ? 2.0 : 1.5;
      sw.sensitivity.push_back(row);
      for (double lr : row.lrs) {
        SweepRun sr;
        sr.name = fmt::format("qk_norm-{}_lr-{}", qk, lr);
        sr.dir = sw.dir + "/" + sr.name;
        sr.overrides = {{"model.qk_norm", qk}, {"optim.lr", lr}};
        sr.status = none && C == 64 && lr == 1e-2 ? "diverged" : "done";
        sr.max_attn_logit = none ? 10 * lr * C : 5.0;
        sw.runs.push_back(sr);
        RunInput r;
        r.name = sw.name;
        r.dir = sr.dir;
        r.sweep = sw.dir;
        r.status = sr.status;
        r.config = parse_config("", "test", {"model.placement=pre", "model.n_layer=2", fmt::format("model.d_model={}", C),
                                             fmt::format("model.n_head={}", C / 16), fmt::format("model.d_ff={}", 4 * C),
                                             std::string("model.qk_norm=") + qk, fmt::format("optim.lr={}", lr)});
        r.metrics.push_back({{"step", 10}, {"loss", 3.0}});
        in.runs.push_back(r);
      }
    }
    in.sweeps.push_back(sw);
  }
  const Report rep = build_report(in, "T", "f");
  const Figure* sens = find(rep, "scaling_sensitivity");
  ASSERT_NE(sens, nullptr);
  ASSERT_EQ(legend(*sens), (std::vector<std::string>{"qk_norm none", "qk_norm rmsnorm"}));
  const auto& none = sens->chart.series[0];
  EXPECT_EQ(none.x, (std::vector<double>{expected(32, 2, false), expected(64, 4, false)}));
  EXPECT_EQ(none.y, (std::vector<double>{0.3, 0.8}));
  EXPECT_EQ(sens->chart.series[1].x, (std::vector<double>{expected(32, 2, true), expected(64, 4, true)}));
  EXPECT_TRUE(sens->chart.x.log);
  EXPECT_NE(sens->table_html.find("1 of 2"), std::string::npos);  // the diverged run counted
  const Figure* best = find(rep, "scaling_best_lr");
  ASSERT_NE(best, nullptr);
  EXPECT_EQ(best->chart.series[0].y, (std::vector<double>{1e-2, 1e-3}));  // d64 without QK-Norm: 1e-2 diverged
  EXPECT_EQ(best->chart.series[1].y, (std::vector<double>{1e-2, 1e-2}));
  const Figure* logit = find(rep, "attn_logit_vs_lr");
  ASSERT_NE(logit, nullptr);
  ASSERT_EQ(logit->chart.series.size(), 4u);  // 2 variants x 2 sizes
  EXPECT_EQ(logit->chart.series[2].x, (std::vector<double>{1e-3, 1e-2}));
  EXPECT_EQ(logit->chart.series[2].y, (std::vector<double>{10 * 1e-3 * 64, 10 * 1e-2 * 64}));
  const auto l = legend(*logit);
  EXPECT_EQ(std::set<std::string>(l.begin(), l.end()).size(), 4u);

  // One sweep alone has no second size: the scaling figures are not shown, and said so.
  in.sweeps.resize(1);
  in.runs.resize(4);
  const Report one = build_report(in, "T", "f");
  EXPECT_EQ(find(one, "scaling_sensitivity"), nullptr);
  EXPECT_NE(find(one, "attn_logit_vs_lr"), nullptr);
  bool said = false;
  for (const auto& s : one.not_shown) said = said || s.find("two model sizes") != std::string::npos;
  EXPECT_TRUE(said);
}

TEST(Report, DistinguishingLabels) {
  using Cfg = std::map<std::string, nlohmann::json>;
  const std::vector<std::string> keys = {"optim.lr", "model.placement", "model.n_layer", "train.threads"};
  // The placement first, bare; other keys short with their value; noise keys (threads) never.
  EXPECT_EQ(distinguishing_labels({Cfg{{"model.placement", "post"}, {"optim.lr", 3e-3}, {"train.threads", 1}},
                                   Cfg{{"model.placement", "pre"}, {"optim.lr", 1e-3}, {"train.threads", 2}}},
                                  keys),
            (std::vector<std::string>{"post, lr 3e-3", "pre, lr 1e-3"}));
  // What all share is left out; `except` too.
  EXPECT_EQ(distinguishing_labels({Cfg{{"model.placement", "post"}, {"model.n_layer", 4}, {"optim.lr", 3e-3}},
                                   Cfg{{"model.placement", "post"}, {"model.n_layer", 8}, {"optim.lr", 1e-3}}},
                                  keys, "optim.lr"),
            (std::vector<std::string>{"n_layer 4", "n_layer 8"}));
  // Nothing differs: empty labels (the caller names the runs).
  EXPECT_EQ(distinguishing_labels({Cfg{{"optim.lr", 3e-3}}, Cfg{{"optim.lr", 3e-3}}}, keys),
            (std::vector<std::string>{"", ""}));
  // Two keys with one short name keep their sections.
  EXPECT_EQ(distinguishing_labels({Cfg{{"data.seed", 1}, {"train.seed", 1}}, Cfg{{"data.seed", 2}, {"train.seed", 3}}},
                                  {"data.seed", "train.seed"}),
            (std::vector<std::string>{"data.seed 1, train.seed 1", "data.seed 2, train.seed 3"}));
  // The optimizer second, bare too (findings 11 and 12 draw optimizers against each other).
  EXPECT_EQ(distinguishing_labels({Cfg{{"model.qk_norm", "none"}, {"optim.name", "adamw"}, {"model.placement", "pre"}},
                                   Cfg{{"model.qk_norm", "rmsnorm"}, {"optim.name", "muon"}, {"model.placement", "peri"}}},
                                  {"model.qk_norm", "optim.name", "model.placement"}),
            (std::vector<std::string>{"pre, adamw, qk_norm none", "peri, muon, qk_norm rmsnorm"}));
  EXPECT_EQ(label_part("model.placement", "peri"), "peri");
  EXPECT_EQ(label_part("optim.lr", 0.003), "lr 3e-3");
}

TEST(Report, EmaSmoothsSkipsAndKeepsGaps) {
  // Bias-corrected: a constant stays constant from the first point.
  EXPECT_EQ(ema({2, 2, 2}, 0.9), (std::vector<double>{2, 2, 2}));
  // s_2 = (0.1 * 0.9 * 1 + 0.1 * 3) / (1 - 0.81) = 0.39 / 0.19.
  const auto s = ema({1, 3}, 0.9);
  EXPECT_DOUBLE_EQ(s[0], 1);
  EXPECT_NEAR(s[1], 0.39 / 0.19, 1e-12);
  // A NaN stays a gap and is not averaged; a skipped step carries the previous value.
  const auto g = ema({1, kNaN, 1, 100, 1}, 0.5, {true, true, true, false, true});
  EXPECT_DOUBLE_EQ(g[0], 1);
  EXPECT_TRUE(std::isnan(g[1]));
  EXPECT_DOUBLE_EQ(g[2], 1);
  EXPECT_DOUBLE_EQ(g[3], 1);
  EXPECT_DOUBLE_EQ(g[4], 1);
  EXPECT_EQ(ema({1, 5, 2}, 0), (std::vector<double>{1, 5, 2}));  // off
  // A smoothed line lags a step change: half-way after 0.9^n = 0.5, n ~ 6.6 points (plus the bias).
  std::vector<double> step(40, 1.0);
  for (std::size_t i = 20; i < 40; ++i) step[i] = 3;
  const auto st = ema(step, 0.9);
  EXPECT_LT(st[21], 2);
  EXPECT_GT(st[39], 2.78);  // 3 - 2 (0.9^20 - 0.9^40) / (1 - 0.9^40) = 2.783
  EXPECT_LT(st[39], 2.79);
  // The weight is per step: points 10 steps apart weigh beta^10 against each other, so a curve
  // logged every 10 steps follows a change as fast (in steps) as one logged every step.
  const double b = std::pow(0.9, 10);
  const auto sp = ema({1, 3}, 0.9, {}, {0, 10});
  EXPECT_DOUBLE_EQ(sp[0], 1);
  EXPECT_NEAR(sp[1], (b * 1 + 3) / (b + 1), 1e-12);
  std::vector<double> every(31), sparse_x, sparse_y;
  for (int i = 0; i <= 30; ++i) every[i] = i < 10 ? 1 : 3;
  for (int i = 0; i <= 30; i += 10) sparse_x.push_back(i), sparse_y.push_back(every[i]);
  const double dense_end = ema(every, 0.9).back();
  const double sparse_end = ema(sparse_y, 0.9, {}, sparse_x).back();
  EXPECT_GT(sparse_end, 2.8);  // per logged point (0.9 between points) it would still be near 2.4
  EXPECT_NEAR(sparse_end, dense_end, 0.15);
}

TEST(Report, TrainingCurvesAreSmoothedOverTheRaw) {
  ReportInputs in;
  in.runs = {run("long", "pre", 1e-3, false, false, 300)};  // 30 logged points
  const Report rep = build_report(in, "T", "f");
  const Figure* f = find(rep, "loss");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(f->chart.series.size(), 2u);  // raw (faint, no legend), smoothed (solid, labelled)
  EXPECT_LT(f->chart.series[0].opacity, 1);
  EXPECT_FALSE(f->chart.series[0].in_legend);
  EXPECT_EQ(f->chart.series[1].opacity, 1);
  EXPECT_TRUE(f->chart.series[1].in_legend);
  EXPECT_EQ(f->chart.series[1].y, ema(f->chart.series[0].y, 0.9, {}, f->chart.series[0].x));
  EXPECT_NE(f->chart.series[1].y, ema(f->chart.series[0].y, 0.9));  // logged every 10 steps, not every step
  EXPECT_NE(f->chart.subtitle.find("EMA, weight 0.9 per step"), std::string::npos);
  // --smoothing 0: the raw curve only.
  ReportOptions off;
  off.smoothing = 0;
  const Report raw_only = build_report(in, "T", "f", off);
  const Figure* r = find(raw_only, "loss");
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->chart.series.size(), 1u);
  EXPECT_EQ(r->chart.series[0].opacity, 1);
  EXPECT_EQ(r->chart.subtitle.find("EMA"), std::string::npos);
}

TEST(Report, DivergedRunMarkedWhereItStoppedWithTheReason) {
  ReportInputs in;
  // Logged every 10 steps up to 40; the trainer stopped it at step 43 (its step line, then the end
  // event), a rollback event on the way.
  RunInput r = run("boom", "post", 1e-2, false, false, 40);
  r.metrics.push_back({{"step", 35}, {"event", "rollback"}, {"loss", 1e9}, {"to_step", 30}});
  r.metrics.push_back({{"step", 43}, {"tokens", 4300}, {"loss", 9.5}, {"lr", 1e-2}, {"grad_norm", 50.0}});
  r.metrics.push_back({{"event", "end"}, {"step", 43}, {"reason", "diverged"},
                       {"detail", "diverged: smoothed loss above the initial loss for 50 steps"},
                       {"train_loss", 7.25}, {"train_loss_steps", 20}, {"val_loss", nullptr}, {"tokens_per_s", 1.0},
                       {"wall_s", 2.0}});
  r.status = "";
  in.runs = {r, run("ok", "pre", 1e-2, false, false, 100)};
  // The status comes from the end event once loaded; here as load_inputs would set it.
  in.runs[0].status = "diverged";
  const Report rep = build_report(in, "T", "f");
  const Figure* f = find(rep, "loss");
  ASSERT_NE(f, nullptr);
  const svg::Series* boom = nullptr;
  for (const auto& s : f->chart.series)
    if (!s.marks.empty()) boom = &s;
  ASSERT_NE(boom, nullptr);
  ASSERT_EQ(boom->marks.size(), 1u);
  EXPECT_DOUBLE_EQ(boom->marks[0].x, 43);
  EXPECT_DOUBLE_EQ(boom->marks[0].y, 9.5);
  EXPECT_NE(boom->marks[0].title.find("step 43: diverged: smoothed loss above"), std::string::npos);
  // The rollback event is not a point of the curve.
  for (const auto& s : f->chart.series)
    for (double x : s.x) EXPECT_NE(x, 35);
  // The tooltip is an SVG <title> of the mark.
  const std::string svg = svg::render(f->chart);
  EXPECT_NE(svg.find("<title>boom (post): diverged at step 43: diverged: smoothed loss above"),
            std::string::npos);
  // The runs table: the step reached (43, not train.steps), the end event's train loss.
  EXPECT_NE(rep.html.find("<td>43</td><td>7.2500</td>"), std::string::npos);
  EXPECT_NE(rep.html.find("train loss"), std::string::npos);
  EXPECT_NE(rep.html.find("final val loss"), std::string::npos);
  // run_end: from the end event; for a run without one, its last step line.
  EXPECT_EQ(run_end(in.runs[0]).reason, "diverged");
  EXPECT_TRUE(run_end(in.runs[0]).from_event);
  EXPECT_DOUBLE_EQ(run_end(in.runs[1]).step, 100);
  EXPECT_FALSE(run_end(in.runs[1]).from_event);
}

TEST(Report, LoadsDirectoriesAndRejectsUnknownOnes) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / "normlab_test_report_inputs";
  fs::remove_all(root);
  fs::create_directories(root / "g");
  std::ofstream(root / "g" / "gradflow.json")
      << R"({"settings": {}, "results": [{"placement": "post", "n_layer": 2, "init": "xavier",
            "grad_norm_layer": [1, null], "hidden_rms": [1, 2, 3]}]})";
  const ReportInputs in = load_inputs({(root / "g").string()});
  ASSERT_EQ(in.gradflows.size(), 1u);
  EXPECT_EQ(in.gradflows[0].results[0].label, "post L=2 xavier");
  EXPECT_TRUE(std::isnan(in.gradflows[0].results[0].grad_norm_layer[1]));
  fs::create_directories(root / "empty");
  EXPECT_THROW(load_inputs({(root / "empty").string()}), FormatError);
  EXPECT_THROW(load_inputs({(root / "missing").string()}), FormatError);
  std::ofstream(root / "g" / "gradflow.json") << "[1, 2";
  EXPECT_THROW(load_inputs({(root / "g").string()}), FormatError);
  // A run's status comes from its last end event (a resumed run's last one), and event lines are
  // not step lines: a run whose file ends with an end event is not "diverged" for lack of a loss.
  fs::create_directories(root / "r");
  std::ofstream(root / "r" / "metrics.jsonl")
      << R"({"step": 1, "loss": 5.0})" "\n" R"({"event": "end", "step": 1, "reason": "interrupted"})" "\n"
      << R"({"step": 2, "loss": 4.0})" "\n" R"({"event": "end", "step": 2, "reason": "done"})" "\n";
  EXPECT_EQ(load_inputs({(root / "r").string()}).runs.at(0).status, "done");
  std::ofstream(root / "r" / "metrics.jsonl") << R"({"step": 1, "loss": 5.0})" "\n"
                                              << R"({"step": 2, "event": "rollback", "to_step": 0})" "\n";
  EXPECT_EQ(load_inputs({(root / "r").string()}).runs.at(0).status, "");  // no config: unknown, not diverged
  fs::remove_all(root);
}

}  // namespace
}  // namespace normlab::report
