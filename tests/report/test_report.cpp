// The report builder on in-memory inputs: series labelled by what differs between configs,
// figures left out (and said so) when no input has their data, diverged runs marked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "report/report.h"

namespace normlab::report {
namespace {

RunInput run(const std::string& name, const std::string& placement, double lr, bool diag, bool diverge = false) {
  RunInput r;
  r.name = name;
  r.dir = "runs/" + name;
  r.config = parse_config("", "test", {"model.placement=" + placement, fmt::format("optim.lr={}", lr),
                                       "model.n_layer=2"});
  for (int step = 10; step <= 50; step += 10) {
    nlohmann::json rec = {{"step", step}, {"tokens", step * 100}, {"loss", 5.0 - step / 20.0}, {"lr", lr},
                          {"grad_norm", 1.0}, {"log_z_mean", 4.0}};
    if (diverge && step == 50) rec["loss"] = nullptr;
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
  EXPECT_EQ(loss->chart.series[0].label, "placement=post, lr=1e-3");
  EXPECT_EQ(loss->chart.series[1].label, "placement=peri, lr=3e-3");
  ASSERT_EQ(loss->chart.series[2].marks.size(), 1u);  // the diverged run
  EXPECT_DOUBLE_EQ(loss->chart.series[2].marks[0].x, 40);
  for (const char* name : {"grad_norm_layers_runs", "resid_rms_runs", "attn_max_logit", "log_z", "grad_norm"})
    EXPECT_NE(find(rep, name), nullptr) << name;
  // Lone runs with different learning rates make a learning-rate figure of their own.
  const Figure* lr = find(rep, "lr_sensitivity");
  ASSERT_NE(lr, nullptr);
  EXPECT_EQ(lr->chart.series.size(), 2u);  // placement=post, placement=peri
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
  fs::remove_all(root);
}

}  // namespace
}  // namespace normlab::report
