// The confirmation's arms on disk: preparing their run directories, measuring them, and checking
// the control's replay of the original run.
#include "lab/confirm_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "doctor/doctor.h"
#include "io/atomic_file.h"
#include "io/metrics.h"
#include "lab/seeds.h"
#include "normlab/checkpoint.h"
#include "normlab/config_file.h"
#include "normlab/metrics.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {
using json = nlohmann::json;

// The k-th largest of xs (1-based), NaN when there are fewer.
double kth_largest(std::vector<double> xs, std::size_t k) {
  if (xs.size() < k || k == 0) return NAN;
  std::nth_element(xs.begin(), xs.begin() + (k - 1), xs.end(), std::greater<>());
  return xs[k - 1];
}

// The finite numbers of a per-layer array (or object of sites) field.
std::vector<double> numbers(const json& j, const char* key) {
  std::vector<double> out;
  const auto it = j.find(key);
  if (it == j.end()) return out;
  if (it->is_number()) out.push_back(it->get<double>());
  if (it->is_array() || it->is_object())
    for (const auto& x : *it)
      if (x.is_number() && std::isfinite(x.get<double>())) out.push_back(x.get<double>());
  return out;
}

bool is_step(const json& j) { return !j.contains(metric::event) && j.contains(metric::step); }

// A probed run's checkpoint folder (normlab.torch.Probe.save_checkpoint): probe_checkpoint.json
// names its step and each file with its size. Damaged: the manifest unreadable or of another
// step, a file missing or of another size (Python's load_checkpoint checks the SHA-256 too).
bool probe_checkpoint_intact(const fs::path& folder) {
  try {
    std::ifstream in(folder / "probe_checkpoint.json");
    const json m = json::parse(in);
    if (m.at("step").get<long>() != checkpoint_step(folder.string())) return false;
    for (const auto& [name, f] : m.at("files").items()) {
      std::error_code ec;
      const auto size = fs::file_size(folder / name, ec);
      if (ec || size != f.at("bytes").get<std::uintmax_t>()) return false;
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace

std::vector<std::pair<long, std::string>> intact_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<long, std::string>> out;
  for (const auto& c : run_checkpoints(run_dir)) {
    const bool probed = fs::exists(fs::path(c) / "probe_checkpoint.json");
    if ((probed ? probe_checkpoint_intact(c) : !checkpoint_damage(c)) && checkpoint_step(c) > 0)
      out.emplace_back(checkpoint_step(c), c);
  }
  return out;
}

std::string confirm_dir(const std::string& run_dir, const std::string& name) {
  return (fs::path(run_dir) / "confirm" / name).string();
}

ArmPoints arm_points(const ConfirmPlan& plan, const Config& run_cfg) {
  ArmPoints a;
  for (std::size_t i = 0; i < plan.arms.size(); ++i) {
    if (!plan.arms[i].cannot.empty()) continue;
    for (int k = 0; k < plan.seeds; ++k) {
      SweepPoint p;
      p.name = seed_dir_name(plan.arms[i].name, k);
      p.seed = k;
      p.overrides = plan.arms[i].set;
      a.points.push_back(p);
      a.configs.push_back(arm_config(plan, plan.arms[i], run_cfg, k));
      a.arm.push_back(i);
    }
  }
  return a;
}

void prepare_arm_dir(const ConfirmPlan& plan, const std::string& run_dir, const std::string& dir,
                     const Config& cfg) {
  if (plan.start_step == 0 || fs::exists(dir)) return;
  const fs::path tmp = fs::path(dir).string() + ".tmp";
  fs::remove_all(tmp);
  const fs::path ck = tmp / "checkpoints";
  fs::create_directories(ck);
  const std::string name = fs::path(plan.start_checkpoint).filename().string();
  fs::copy(plan.start_checkpoint, ck / name, fs::copy_options::recursive);
  std::ofstream(ck / "latest") << name << '\n';
  for (const char* t : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(fs::path(run_dir) / t)) fs::copy_file(fs::path(run_dir) / t, tmp / t);
  // The run's records up to the start (the arm's metrics continue them; its doctor sees the
  // whole history, as the original's did).
  {
    std::ofstream m(tmp / "metrics.jsonl");
    for (const auto& j : read_metrics(run_dir)) {
      if (j.value(metric::step, 0L) > plan.start_step) continue;
      if (j.contains(metric::event) && j[metric::event] == "end") continue;
      m << j.dump() << '\n';
    }
  }
  std::ofstream(tmp / "config.toml") << dump_config_toml(cfg);
  fs::rename(tmp, dir);
}

double measure_statistic(const std::string& name, const std::vector<json>& records, long start,
                         long end, double unigram_entropy) {
  using T = DoctorThresholds;
  std::vector<double> per_record;  // the record's value, over the window's records
  double base_z = NAN, min_loss = INFINITY, last_loss = NAN;
  long spikes = 0, window_records = 0, diag_records = 0;
  for (const auto& j : records) {
    if (!is_step(j)) continue;
    const long s = j.value(metric::step, 0L);
    const double loss =
        j.value(metric::loss, json(nullptr)).is_number() ? j[metric::loss].get<double>() : NAN;
    const double z = j.value(metric::log_z_mean, json(nullptr)).is_number()
                         ? j[metric::log_z_mean].get<double>()
                         : NAN;
    if (std::isnan(base_z) && std::isfinite(z)) base_z = z;
    const bool in = s > start && s <= end;
    if (in) {
      ++window_records;
      diag_records += j.contains(metric::resid_rms);
      if (name == "spike_count" && std::isfinite(loss) && std::isfinite(min_loss) &&
          loss - min_loss >= std::max(T::kSpikeNats, T::kSpikeFraction * min_loss))
        ++spikes;
      if (std::isfinite(loss)) last_loss = loss;
      if (name == "log_z_drift" && std::isfinite(z) && std::isfinite(base_z))
        per_record.push_back(std::fabs(z - base_z));
      for (const char* f : {metric::attn_max_logit, metric::resid_rms, metric::dyt_saturated,
                            metric::max_logit_raw}) {
        if (name != f) continue;
        const auto v = numbers(j, f);
        if (!v.empty()) per_record.push_back(*std::max_element(v.begin(), v.end()));
      }
    }
    if (std::isfinite(loss)) min_loss = std::min(min_loss, loss);
  }
  if (window_records == 0) return NAN;
  if (name == "spike_count") return static_cast<double>(spikes);
  if (name == "loss_end") return last_loss;
  if (name == "unigram_gap") return last_loss - unigram_entropy;
  // Diagnostics records without DyT / Derf sites (a treatment that replaced them by a norm):
  // nothing can saturate.
  if (per_record.empty() && name == "dyt_saturated" && diag_records > 0) return 0;
  if (per_record.empty()) return NAN;
  // A drift or a saturation must hold on several records to count, as doctor's checks ask.
  if (name == "log_z_drift") return kth_largest(per_record, T::kLogZDriftSteps);
  if (name == "dyt_saturated") return kth_largest(per_record, T::kDytSaturatedRecords);
  return *std::max_element(per_record.begin(), per_record.end());
}

std::vector<std::pair<long, double>> statistic_series(const std::string& name,
                                                      const std::vector<json>& records, long start,
                                                      long end) {
  std::vector<std::pair<long, double>> out;
  double base_z = NAN;
  for (const auto& j : records) {
    if (!is_step(j)) continue;
    const long s = j.value(metric::step, 0L);
    const auto z = numbers(j, metric::log_z_mean);
    if (std::isnan(base_z) && !z.empty()) base_z = z[0];
    if (s <= start || s > end) continue;
    std::vector<double> v;
    if (name == "log_z_drift") {
      if (!z.empty() && std::isfinite(base_z)) v.push_back(std::fabs(z[0] - base_z));
    } else if (name == "attn_max_logit" || name == "resid_rms" || name == "dyt_saturated" ||
               name == "max_logit_raw") {
      v = numbers(j, name.c_str());
    } else {
      v = numbers(j, metric::loss);
    }
    if (!v.empty()) out.emplace_back(s, *std::max_element(v.begin(), v.end()));
  }
  return out;
}

std::string replay_check(const std::string& run_dir, const std::string& dir, long start, long end,
                         bool& bitwise) {
  bitwise = false;
  auto window = [&](const std::string& d) {
    std::vector<json> out;
    for (auto& j : read_metrics(d))
      if (is_step(j) && j.value(metric::step, 0L) > start && j.value(metric::step, 0L) <= end)
        out.push_back(std::move(j));
    return out;
  };
  const auto a = window(run_dir), b = window(dir);
  if (a.empty()) return "the original run has no step record in the window";
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i) {
    const long sa = a[i].value(metric::step, 0L), sb = b[i].value(metric::step, 0L);
    if (sa != sb)
      return fmt::format("differs: the original logged step {} where the replay logged step {}", sa,
                         sb);
    for (const char* f : {metric::loss, metric::grad_norm})
      if (a[i].value(f, json(nullptr)) != b[i].value(f, json(nullptr)))
        return fmt::format("differs at step {}: {} {} (original) vs {} (replay)", sa, f,
                           a[i].value(f, json(nullptr)).dump(),
                           b[i].value(f, json(nullptr)).dump());
  }
  if (b.size() < a.size())
    return fmt::format("the replay stopped at step {}, the original went on to step {}",
                       b.empty() ? start : b.back().value(metric::step, 0L),
                       a.back().value(metric::step, 0L));
  bitwise = true;
  return fmt::format(
      "bitwise: loss and gradient norm of the {} step records {}..{} equal the "
      "original's",
      n, a.front().value(metric::step, 0L), a[n - 1].value(metric::step, 0L));
}

Confirmation measure_confirmation(const ConfirmPlan& plan, const std::string& run_dir,
                                  const std::string& out, double unigram_entropy) {
  Confirmation c;
  c.plan = plan;
  const std::string stat =
      confirm_statistic_known(plan.problem.statistic) ? plan.problem.statistic : "loss_end";
  for (const auto& arm : plan.arms) {
    ArmResult r;
    r.name = arm.name;
    r.remedy = arm.remedy;
    r.cannot = arm.cannot;
    if (arm.cannot.empty())
      for (int k = 0; k < plan.seeds; ++k) {
        const std::string dir = (fs::path(out) / seed_dir_name(arm.name, k)).string();
        const SweepRun sr = read_sweep_run(dir, SweepPoint{seed_dir_name(arm.name, k), {}, k});
        double v = NAN, loss = NAN;
        if (fs::exists(fs::path(dir) / "metrics.jsonl")) {
          const auto recs = read_metrics(dir);
          v = measure_statistic(stat, recs, plan.start_step, plan.window_end, unigram_entropy);
          loss = sr.train_loss.value_or(
              measure_statistic("loss_end", recs, plan.start_step, plan.window_end, 0));
          // At the end of the window, the end event's train loss (the mean of its last steps,
          // as doctor's plateau check reads it) rather than one step's.
          if (sr.train_loss && stat == "unigram_gap") v = *sr.train_loss - unigram_entropy;
          if (sr.train_loss && stat == "loss_end") v = *sr.train_loss;
        }
        r.stat.push_back(v);
        r.loss_end.push_back(loss);
        r.diverged.push_back(sr.status == "diverged");
        r.status.push_back(sr.status);
      }
    c.arms.push_back(std::move(r));
  }
  for (std::size_t i = 1; i < c.arms.size(); ++i)
    c.verdicts.push_back(judge_remedy(c.arms[0], c.arms[i], confirm_default_threshold(stat)));
  if (!plan.arms[0].cannot.empty()) {
    c.replay_check = "not run (nothing to confirm)";
    return c;
  }
  c.replay_check = replay_check(run_dir, (fs::path(out) / "control").string(), plan.start_step,
                                plan.window_end, c.replay_bitwise);
  return c;
}

}  // namespace normlab
