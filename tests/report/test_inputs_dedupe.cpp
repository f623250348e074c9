// A report given a sweep and one of its runs (or one run twice, spelled differently) counts that
// run once, as the sweep's run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fixtures.h"
#include "report/inputs.h"

namespace fs = std::filesystem;

namespace normlab::report {
namespace {

void write_run(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << R"({"step":1,"loss":5.5})" << '\n'
                                       << R"({"step":2,"loss":5.0})" << '\n';
}

TEST(ReportInputs, ARunGivenAloneAndInItsSweepCountsOnce) {
  const fs::path sw = test::temp_dir("report_dedupe");
  write_run(sw / "lr-0.001");
  write_run(sw / "lr-0.01");
  std::ofstream(sw / "sweep.json") << R"({"lr_key":"optim.lr","runs":[
    {"name":"lr-0.001","dir":"lr-0.001","overrides":{"optim.lr":"0.001"},"status":"done"},
    {"name":"lr-0.01","dir":"lr-0.01","overrides":{"optim.lr":"0.01"},"status":"diverged"}]})";
  for (const auto& dirs : std::vector<std::vector<std::string>>{
           {sw.string(), (sw / "lr-0.001").string()},
           {(sw / "lr-0.001").string(), sw.string()},
           {sw.string(), (sw / "." / "lr-0.01" / "").string(), sw.string()}}) {
    const ReportInputs in = load_inputs(dirs);
    ASSERT_EQ(in.runs.size(), 2u) << dirs[0] << " " << dirs[1];
    for (const auto& r : in.runs) {
      EXPECT_FALSE(r.sweep.empty()) << r.dir;  // kept as the sweep's run
      EXPECT_EQ(r.name.find('/'), std::string::npos) << r.name;  // no clash left to resolve
    }
  }
  const ReportInputs twice = load_inputs({(sw / "lr-0.01").string(), (sw / "lr-0.01/").string()});
  EXPECT_EQ(twice.runs.size(), 1u);
  fs::remove_all(sw);
}

}  // namespace
}  // namespace normlab::report
