#include "report/inputs.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <cstdlib>

#include <fmt/format.h>

#include "io/metrics.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool is_run_dir(const fs::path& d) {
  return fs::is_regular_file(d / "config.toml") || fs::is_regular_file(d / "metrics.jsonl");
}
bool is_sweep_dir(const fs::path& d) { return fs::is_regular_file(d / "sweep.json"); }
bool is_gradflow_dir(const fs::path& d) { return fs::is_regular_file(d / "gradflow.json"); }
bool is_coordcheck_dir(const fs::path& d) { return fs::is_regular_file(d / "coordcheck.json"); }

// `d` without a trailing separator ("runs/post/" -> "runs/post").
fs::path strip(const fs::path& d) {
  fs::path p = d.lexically_normal();
  return p.filename().empty() && p.has_parent_path() ? p.parent_path() : p;
}

// The last component of a directory path ("runs/post/" -> "post").
std::string dir_name(const fs::path& d) {
  std::string s = strip(d).filename().string();
  if (s.empty() || s == "." || s == "..") s = fs::absolute(d).lexically_normal().filename().string();
  return s.empty() ? d.string() : s;
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw FormatError(fmt::format("cannot read {}", path.string()));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw FormatError(fmt::format("{}: not valid JSON: {}", path.string(), e.what()));
  }
}

std::string string_or(const json& j, const char* key, std::string fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::vector<double> numbers(const json& j, const char* key) {
  std::vector<double> out;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& v : *it) out.push_back(v.is_number() ? v.get<double>() : kNaN);
  return out;
}

// metrics.jsonl, tolerating lines that do not parse (a torn last line after a crash).
std::vector<json> read_metrics_lenient(const fs::path& dir, std::vector<std::string>& notes) {
  std::vector<json> records;
  try {
    records = read_metrics(dir.string());
  } catch (const json::exception&) {
    records.clear();
    std::ifstream in(dir / "metrics.jsonl");
    std::string line;
    std::size_t bad = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        records.push_back(json::parse(line));
      } catch (const json::exception&) {
        ++bad;
      }
    }
    notes.push_back(fmt::format("{}/metrics.jsonl: skipped {} line{} that did not parse", dir.string(), bad,
                                bad == 1 ? "" : "s"));
  }
  std::erase_if(records, [](const json& r) { return !r.is_object(); });
  return records;
}

// The reason of the last end event (done, interrupted, diverged); for runs without one, diverged /
// incomplete / done from the last step line and the configured number of steps.
std::string derive_status(const RunInput& r) {
  const json* last_step = nullptr;
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it) {
    const auto ev = it->find(metric::event);
    if (ev == it->end()) {
      if (!last_step) last_step = &*it;
    } else if (*ev == "end" && it->contains(metric::reason) && (*it)[metric::reason].is_string()) {
      return (*it)[metric::reason].get<std::string>();
    }
  }
  if (!last_step) return "";
  const json& last = *last_step;
  if (!std::isfinite(number_or_nan(last, metric::loss))) return "diverged";
  if (r.config && number_or_nan(last, metric::step) < r.config->train.steps) return "incomplete";
  return r.config ? "done" : "";
}

RunInput load_run(const fs::path& dir, std::string name, ReportInputs& in) {
  RunInput r;
  r.dir = dir.string();
  r.name = std::move(name);
  if (fs::is_regular_file(dir / "config.toml")) {
    try {
      r.config = load_config((dir / "config.toml").string());
    } catch (const ConfigError& e) {
      in.notes.push_back(fmt::format("{}/config.toml not used ({}{}); showing its metrics only", r.dir,
                                     e.problems.empty() ? e.what() : e.problems.front(),
                                     e.problems.size() > 1 ? fmt::format(" and {} more", e.problems.size() - 1)
                                                           : std::string()));
    }
  }
  if (fs::is_regular_file(dir / "metrics.jsonl"))
    r.metrics = read_metrics_lenient(dir, in.notes);
  else
    in.notes.push_back(fmt::format("{} has no metrics.jsonl", r.dir));
  r.status = derive_status(r);  // the end event's reason, else judged from the step lines
  return r;
}

void load_sweep(const fs::path& dir, ReportInputs& in) {
  const fs::path path = dir / "sweep.json";
  const json j = read_json(path);
  SweepInput s;
  s.dir = dir.string();
  s.name = dir_name(dir);
  try {
    if (!j.is_object()) throw FormatError("the top level is not an object");
    s.lr_key = string_or(j, "lr_key", "optim.lr");
    s.grid = j.value("grid", json::object());
    const json runs = j.value("runs", json::array());
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const json& e = runs[i];
      if (!e.is_object()) throw FormatError(fmt::format("runs[{}] is not an object", i));
      SweepRun sr;
      sr.name = string_or(e, "name", fmt::format("run{}", i));
      sr.dir = (dir / string_or(e, "dir", sr.name)).string();
      sr.overrides = e.value("overrides", json::object());
      sr.status = string_or(e, "status", "");
      sr.message = string_or(e, "message", "");
      sr.initial_loss = number_or_nan(e, "initial_loss");
      sr.final_loss = number_or_nan(e, "final_loss");
      sr.final_val_loss = number_or_nan(e, "final_val_loss");
      sr.max_attn_logit = number_or_nan(e, "max_attn_logit");
      if (is_run_dir(sr.dir)) {
        RunInput r = load_run(sr.dir, sr.name, in);
        r.sweep = s.dir;
        if (!sr.status.empty()) r.status = sr.status;
        in.runs.push_back(std::move(r));
      } else if (sr.status != "failed") {
        in.notes.push_back(fmt::format("{}: run '{}' has no run directory at {}", path.string(), sr.name, sr.dir));
      }
      s.runs.push_back(std::move(sr));
    }
    for (const json& e : j.value("sensitivity", json::array())) {
      if (!e.is_object()) throw FormatError("a sensitivity entry is not an object");
      SensitivityRow row;
      row.variant = e.value("variant", json::object());
      row.label = string_or(e, "label", "");
      if (row.label.empty()) {
        for (const auto& [k, v] : row.variant.items())
          row.label += (row.label.empty() ? "" : ", ") + k.substr(k.find('.') + 1) + "=" +
                       (v.is_string() ? v.get<std::string>() : v.dump());
        if (row.label.empty()) row.label = "all runs";
      }
      row.sensitivity = number_or_nan(e, "sensitivity");
      row.best_loss = number_or_nan(e, "best_loss");
      row.lrs = numbers(e, "lrs");
      row.final_losses = numbers(e, "final_losses");
      row.final_losses.resize(row.lrs.size(), kNaN);
      if (e.contains("final_loss_min") && e.contains("final_loss_max")) {
        row.final_loss_min = numbers(e, "final_loss_min");
        row.final_loss_max = numbers(e, "final_loss_max");
        row.final_loss_min.resize(row.lrs.size(), kNaN);
        row.final_loss_max.resize(row.lrs.size(), kNaN);
      }
      s.sensitivity.push_back(std::move(row));
    }
  } catch (const json::exception& e) {
    throw FormatError(fmt::format("{}: {}", path.string(), e.what()));
  } catch (const FormatError& e) {
    if (std::string_view(e.what()).starts_with(path.string())) throw;
    throw FormatError(fmt::format("{}: {}", path.string(), e.what()));
  }
  in.sweeps.push_back(std::move(s));
}

void load_gradflow(const fs::path& dir, ReportInputs& in) {
  const fs::path path = dir / "gradflow.json";
  const json j = read_json(path);
  GradflowInput g;
  g.dir = dir.string();
  try {
    if (!j.is_object()) throw FormatError(fmt::format("{}: the top level is not an object", path.string()));
    g.settings = j.value("settings", json::object());
    for (const json& e : j.value("results", json::array())) {
      if (!e.is_object()) throw FormatError(fmt::format("{}: a result is not an object", path.string()));
      GradflowResult r;
      r.placement = string_or(e, "placement", "");
      r.init = string_or(e, "init", "");
      r.n_layer = e.value("n_layer", 0);
      r.label = string_or(e, "label", fmt::format("{} L={} {}", r.placement, r.n_layer, r.init));
      r.grad_norm_layer = numbers(e, "grad_norm_layer");
      r.grad_norm_attn = numbers(e, "grad_norm_attn");
      r.grad_norm_mlp = numbers(e, "grad_norm_mlp");
      r.hidden_rms = numbers(e, "hidden_rms");
      g.results.push_back(std::move(r));
    }
  } catch (const json::exception& e) {
    throw FormatError(fmt::format("{}: {}", path.string(), e.what()));
  }
  in.gradflows.push_back(std::move(g));
}

void load_coordcheck(const fs::path& dir, ReportInputs& in) {
  const fs::path path = dir / "coordcheck.json";
  try {
    in.coordchecks.push_back({dir.string(), coordcheck_from_json(read_json(path))});
  } catch (const FormatError& e) {
    if (std::string_view(e.what()).starts_with(path.string())) throw;
    throw FormatError(fmt::format("{}: {}", path.string(), e.what()));
  }
}

// Loads `dir` if it is of a known kind; returns false otherwise.
bool load_known(const fs::path& dir, ReportInputs& in) {
  bool known = false;
  if (is_sweep_dir(dir)) {
    load_sweep(dir, in);
    known = true;
  }
  if (is_gradflow_dir(dir)) {
    load_gradflow(dir, in);
    known = true;
  }
  if (is_coordcheck_dir(dir)) {
    load_coordcheck(dir, in);
    known = true;
  }
  if (!known && is_run_dir(dir)) {
    in.runs.push_back(load_run(dir, dir_name(dir), in));
    known = true;
  }
  return known;
}

}  // namespace

double number_or_nan(const json& j, const char* key) {
  if (!j.is_object()) return kNaN;
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : kNaN;
}

double as_double(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return kNaN;
  const std::string s = v.get<std::string>();
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size() ? d : kNaN;
}

bool same_value(const json& a, const json& b) {
  const double x = as_double(a), y = as_double(b);
  if (!std::isnan(x) && !std::isnan(y)) return x == y;
  const auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  return text(a) == text(b);
}

ReportInputs load_inputs(const std::vector<std::string>& dirs) {
  ReportInputs in;
  for (const auto& d : dirs) {
    const fs::path dir(d);
    if (!fs::is_directory(dir)) throw FormatError(fmt::format("{} is not a directory", d));
    if (load_known(dir, in)) continue;
    // A directory of runs, such as the output of `normlab compare`.
    std::vector<fs::path> subs;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory()) subs.push_back(e.path());
    std::sort(subs.begin(), subs.end());
    bool any = false;
    for (const auto& s : subs) any = load_known(s, in) || any;
    if (!any)
      throw FormatError(fmt::format("{} holds no config.toml or metrics.jsonl (run), sweep.json (sweep) or "
                                    "gradflow.json (gradflow study) or coordcheck.json (coordinate "
                                    "check), nor subdirectories that do",
                                    d));
  }
  // A run given on its own and as part of a sweep (or twice) counts once, as the sweep's run.
  std::vector<RunInput> unique;
  std::map<std::string, std::size_t> seen;
  for (auto& r : in.runs) {
    std::error_code ec;
    const fs::path canon = fs::weakly_canonical(strip(r.dir), ec);
    const auto [it, fresh] = seen.emplace(ec ? r.dir : canon.string(), unique.size());
    if (fresh)
      unique.push_back(std::move(r));
    else if (unique[it->second].sweep.empty() && !r.sweep.empty())
      unique[it->second] = std::move(r);
  }
  in.runs = std::move(unique);
  // Names label the runs: make them unique by prefixing the parent directory where they clash.
  std::map<std::string, int> count;
  for (const auto& r : in.runs) ++count[r.name];
  for (auto& r : in.runs)
    if (count[r.name] > 1) r.name = dir_name(strip(r.dir).parent_path()) + "/" + r.name;
  return in;
}

}  // namespace normlab::report
