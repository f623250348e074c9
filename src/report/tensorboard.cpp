#include "report/tensorboard.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "io/tfevents.h"
#include "normlab/metrics.h"

namespace fs = std::filesystem;

namespace normlab::report {

namespace {

using json = nlohmann::json;

// Every number under `v` as (tag, value): arrays by index, objects by key, booleans as 0/1.
void flatten(const std::string& tag, const json& v, std::vector<std::pair<std::string, float>>& out) {
  if (v.is_boolean()) {
    out.emplace_back(tag, v.get<bool>() ? 1.0f : 0.0f);
  } else if (v.is_number()) {
    out.emplace_back(tag, static_cast<float>(v.get<double>()));
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) flatten(fmt::format("{}/{}", tag, i), v[i], out);
  } else if (v.is_object()) {
    for (const auto& [k, x] : v.items()) flatten(tag + "/" + k, x, out);
  }  // null (a non-finite number), strings: nothing
}

// Seconds since the epoch at which the run's time_s = 0.
double start_of(const RunInput& run) {
  double last = 0;
  for (const json& j : run.metrics)
    if (j.contains(metric::time_s) && j[metric::time_s].is_number())
      last = std::fmax(last, j[metric::time_s].get<double>());
  std::error_code ec;
  const auto t = fs::last_write_time(fs::path(run.dir) / "metrics.jsonl", ec);
  const auto sys = ec ? std::chrono::system_clock::now()
                      : std::chrono::file_clock::to_sys(t);
  return std::chrono::duration<double>(sys.time_since_epoch()).count() - last;
}

std::string safe_name(std::string s) {
  for (char& c : s)
    if (c == '/' || c == '\\' || c == '\0') c = '_';
  return s.empty() || s == "." || s == ".." ? "run" : s;
}

}  // namespace

TensorboardWritten write_tensorboard(const ReportInputs& in, const std::string& out_dir) {
  TensorboardWritten w;
  std::map<std::string, int> used;
  for (const RunInput& run : in.runs) {
    std::string name = safe_name(run.name);
    if (const int n = used[name]++; n > 0) name += fmt::format("_{}", n + 1);
    const fs::path dir = fs::path(out_dir) / name;
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) fs::remove(e.path());
    const double start = start_of(run);
    const std::string file =
        (dir / fmt::format("events.out.tfevents.{}.normlab", static_cast<long>(start))).string();
    TfEventsWriter tb(file, start);
    for (const json& j : run.metrics) {
      if (!j.is_object() || j.contains(metric::event) || !j.contains(metric::step)) continue;
      std::vector<std::pair<std::string, float>> values;
      for (const auto& [k, v] : j.items())
        if (k != metric::step && k != metric::time_s) flatten(k, v, values);
      const double t = j.contains(metric::time_s) && j[metric::time_s].is_number()
                           ? j[metric::time_s].get<double>() : 0.0;
      tb.scalars(j[metric::step].get<long>(), start + t, values);
      ++w.events;
      w.scalars += static_cast<long>(values.size());
    }
    tb.close();
    w.files.push_back(file);
  }
  return w;
}

}  // namespace normlab::report
