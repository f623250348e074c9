// The confirmation's plan (start, window, arms) and its verdict rules on measured numbers.
#include "lab/confirm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "doctor/doctor.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"

namespace normlab {

namespace {
using T = DoctorThresholds;

// Every statistic is lower-is-better; `threshold` is where its condition starts (none: no
// condition). docs/doctor.md, "Confirming a remedy", defines each on an arm's window.
struct StatisticRow {
  const char* name;
  std::optional<double> threshold;
};
const std::vector<StatisticRow>& statistics() {
  static const std::vector<StatisticRow> rows = {
      {"attn_max_logit", T::kAttnLogit},  {"spike_count", 1.0},
      {"log_z_drift", T::kLogZDrift},     {"resid_rms", T::kResidRms},
      {"max_logit_raw", T::kOutputLogit}, {"dyt_saturated", T::kDytSaturated},
      {"unigram_gap", -T::kPlateauBelow}, {"loss_end", std::nullopt},
  };
  return rows;
}

std::string fmt_num(double v) {
  if (!std::isfinite(v)) return "-";
  if (std::fabs(v) >= 1e4 || (v != 0 && std::fabs(v) < 1e-3)) return fmt::format("{:.3e}", v);
  return fmt::format("{:.4g}", v);
}

nlohmann::json num_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
}  // namespace

bool confirm_statistic_known(const std::string& name) {
  return std::any_of(statistics().begin(), statistics().end(),
                     [&](const StatisticRow& r) { return name == r.name; });
}

std::optional<double> confirm_default_threshold(const std::string& name) {
  for (const auto& r : statistics())
    if (name == r.name) return r.threshold;
  return std::nullopt;
}

long ConfirmPlan::arms_run() const {
  return std::count_if(arms.begin(), arms.end(), [](const ArmPlan& a) { return a.cannot.empty(); });
}

ConfirmPlan plan_confirmation(const ConfirmProblem& p, const Config& run_cfg,
                              const std::vector<std::pair<long, std::string>>& checkpoints,
                              long run_end, int seeds, long max_steps, const CannotRun& cannot,
                              const FixedOnResume& fixed) {
  if (seeds < 1) throw ConfigError({fmt::format("--seeds {} must be >= 1", seeds)});
  ConfirmPlan plan;
  plan.problem = p;
  plan.seeds = seeds;
  plan.run_steps = run_cfg.train.steps;
  const long onset = std::max(1L, p.onset_step);
  if (!confirm_statistic_known(p.statistic))
    plan.notes.push_back(
        fmt::format("doctor's statistic '{}' is not one confirm measures: the "
                    "arms are compared on loss_end",
                    p.statistic));
  plan.arms.push_back({"control", "", {}, ""});
  const std::vector<std::string> resumable = resumable_keys();
  std::string fixed_key;  // a runnable remedy's key that cannot change on resume
  int n = 0;
  for (const auto& r : p.remedies) {
    if (r.tried) {
      plan.notes.push_back("already tried (the run's config holds it): " + r.text);
      continue;
    }
    // Named by its changes ("qk_norm-rmsnorm"), as a sweep names its points: the same change
    // for two problems with the same window is one arm, trained once.
    std::string name;
    for (const auto& [k, v] : r.set)
      name += (name.empty() ? "" : "_") + k.substr(k.find('.') + 1) + "-" + v;
    for (char& ch : name)
      if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.'))
        ch = '_';
    ++n;
    if (name.empty()) name = fmt::format("remedy{}", n);
    ArmPlan a{name, r.text, r.set, ""};
    if (r.set.empty()) a.cannot = "not expressible as config changes";
    if (a.cannot.empty() && cannot) a.cannot = cannot(r.set);
    for (const auto& [k, v] : r.set)
      if (a.cannot.empty() && fixed_key.empty() &&
          (fixed ? fixed(k) : std::find(resumable.begin(), resumable.end(), k) == resumable.end()))
        fixed_key = k;
    plan.arms.push_back(std::move(a));
  }
  // The start: the newest intact checkpoint a margin before the onset, unless a remedy changes
  // what a checkpoint holds (then every arm, the control too, starts afresh so they stay paired).
  const long margin = std::max(ConfirmRules::kMarginSteps,
                               static_cast<long>(std::ceil(ConfirmRules::kMarginFraction * onset)));
  const long latest_ok = onset - margin;
  std::pair<long, std::string> best{0, ""};
  for (const auto& c : checkpoints)
    if (c.first <= latest_ok && c.first > best.first && c.first < run_cfg.train.steps) best = c;
  if (!fixed_key.empty()) {
    plan.start_why = fmt::format(
        "{} cannot change on resume: every arm starts at step 0 with the run's seed", fixed_key);
  } else if (best.first == 0) {
    plan.start_why = fmt::format(
        "no intact checkpoint at or before step {} (onset {} - margin {}): every arm starts at "
        "step 0 with the run's seed",
        latest_ok, onset, margin);
  } else {
    plan.start_step = best.first;
    plan.start_checkpoint = best.second;
    plan.start_why = fmt::format(
        "the newest intact checkpoint at or before step {} (onset {} - "
        "margin {})",
        latest_ok, onset, margin);
  }
  const long appear = onset - plan.start_step;
  long end = onset + std::max(ConfirmRules::kMinWindowAfterOnset,
                              static_cast<long>(std::ceil(ConfirmRules::kWindowMultiple * appear)));
  plan.window_why =
      fmt::format("onset {} + max({}, {} x the {} steps it took to appear)", onset,
                  ConfirmRules::kMinWindowAfterOnset, ConfirmRules::kWindowMultiple, appear);
  // The plateau and the final loss are conditions of the end of a run: judged there.
  if (p.statistic == "unigram_gap" || p.statistic == "loss_end") end = run_cfg.train.steps;
  if (end >= run_cfg.train.steps) {
    end = run_cfg.train.steps;
    plan.window_why = "to the run's end (train.steps)";
  }
  if (max_steps > 0 && end - plan.start_step > max_steps) {
    end = plan.start_step + max_steps;
    plan.window_why = fmt::format("capped by --max-steps {}", max_steps);
    if (end < onset)
      plan.notes.push_back(
          fmt::format("the window ends at step {}, before the onset (step {}): "
                      "the condition may not have time to come back",
                      end, onset));
  }
  plan.window_end = end;
  if (plan.arms_run() == 1) {  // the control alone tests nothing
    plan.arms[0].cannot = "no remedy of this problem can be run as config changes";
    plan.notes.push_back(
        "nothing to confirm: no remedy of this problem is a config change that "
        "was not tried already");
  }
  if (run_end > 0 && run_end < end)
    plan.notes.push_back(
        fmt::format("the run stopped at step {}: the control's replay is compared "
                    "with it up to there",
                    run_end));
  return plan;
}

Config arm_config(const ConfirmPlan& plan, const ArmPlan& arm, const Config& run_cfg, int k) {
  std::vector<std::string> ov;
  for (const auto& [key, v] : arm.set) ov.push_back(key + "=" + v);
  ov.push_back(fmt::format("train.data_seed={}", k));
  ov.push_back(fmt::format("train.stop_at={}", plan.window_end));
  Config c = parse_config(dump_config_toml(run_cfg), "the run's config.toml", ov);
  // The checkpoints an arm needs: its end (and the steps the run itself saved at).
  return c;
}

RemedyVerdict judge_remedy(const ArmResult& control, const ArmResult& treatment,
                           std::optional<double> threshold) {
  RemedyVerdict v;
  if (!treatment.cannot.empty()) {
    v.verdict = "cannot confirm";
    v.reason = treatment.cannot;
    return v;
  }
  const std::size_t K = std::min(control.stat.size(), treatment.stat.size());
  v.seeds = static_cast<int>(K);
  auto present = [&](const ArmResult& a, std::size_t k) {
    return a.diverged[k] || (std::isfinite(a.stat[k]) && a.stat[k] >= *threshold);
  };
  std::vector<std::string> missing;
  for (std::size_t k = 0; k < K; ++k)
    for (const ArmResult* a : {&control, &treatment})
      if (!a->diverged[k] && !std::isfinite(a->stat[k]))
        missing.push_back(fmt::format("{} seed {} ({})", a->name, k, a->status[k]));
  if (K == 0 || !missing.empty()) {
    v.verdict = "inconclusive";
    v.reason =
        K == 0 ? "no seed was measured" : fmt::format("not measured: {}", fmt::join(missing, ", "));
    return v;
  }
  // Paired differences control - treatment (lower is better: > 0 means the treatment helped),
  // over the seeds where both are finite; the spread is the larger of the arms' seed std.
  std::vector<double> d, cs, ts, lc, lt, ld;
  for (std::size_t k = 0; k < K; ++k) {
    if (std::isfinite(control.stat[k]) && std::isfinite(treatment.stat[k])) {
      d.push_back(control.stat[k] - treatment.stat[k]);
      cs.push_back(control.stat[k]);
      ts.push_back(treatment.stat[k]);
    }
    if (std::isfinite(control.loss_end[k]) && std::isfinite(treatment.loss_end[k]) &&
        !control.diverged[k]) {
      ld.push_back(treatment.loss_end[k] - control.loss_end[k]);
      lc.push_back(control.loss_end[k]);
      lt.push_back(treatment.loss_end[k]);
    }
  }
  const SeedStats sd = seed_stats(d), sc = seed_stats(cs), st = seed_stats(ts);
  v.diff_mean = sd.mean;
  v.spread = sc.n >= 2 && st.n >= 2 ? std::max(sc.std, st.std) : NAN;
  const SeedStats sl = seed_stats(ld), slc = seed_stats(lc), slt = seed_stats(lt);
  v.loss_diff = sl.mean;
  v.loss_spread = slc.n >= 2 && slt.n >= 2 ? std::max(slc.std, slt.std) : 0.0;
  bool treat_diverged_alone = false;
  for (std::size_t k = 0; k < K; ++k)
    treat_diverged_alone |= treatment.diverged[k] && !control.diverged[k];
  const bool loss_worse =
      treat_diverged_alone || (std::isfinite(v.loss_diff) && v.loss_diff > v.loss_spread);
  const bool beyond =
      std::isfinite(v.diff_mean) && std::isfinite(v.spread) && sd.n >= 2 && v.diff_mean > v.spread;
  const std::string numbers = fmt::format(
      "paired difference (control - treatment) {} against a seed spread {}; loss at the window's "
      "end {} by {} (spread {})",
      fmt_num(v.diff_mean), fmt_num(v.spread),
      std::isfinite(v.loss_diff) && v.loss_diff > 0 ? "worse" : "better",
      fmt_num(std::fabs(v.loss_diff)), fmt_num(v.loss_spread));
  const bool half_c = [&] {
    if (!threshold) return false;
    for (std::size_t k = 0; k < K; ++k) v.control_present += present(control, k);
    for (std::size_t k = 0; k < K; ++k) v.treatment_present += present(treatment, k);
    return true;
  }();
  if (half_c && 2 * v.control_present <= static_cast<int>(K)) {
    v.verdict = "control did not reproduce";
    v.reason = fmt::format(
        "the condition came back in {} of {} control seeds (at least {} needed): the run's "
        "problem was circumstance, not the config; {}",
        v.control_present, K, K / 2 + 1, numbers);
    return v;
  }
  if (half_c && 2 * v.treatment_present > static_cast<int>(K)) {
    v.verdict = "not confirmed";
    v.reason = fmt::format(
        "the condition persists in {} of {} treatment seeds (control: {} of "
        "{}); {}",
        v.treatment_present, K, v.control_present, K, numbers);
    return v;
  }
  const bool removed = half_c && v.treatment_present == 0;
  if (removed || beyond) {
    if (loss_worse) {
      v.verdict = "not confirmed";
      v.reason = fmt::format("{} but the loss is worse beyond the seed spread{}; {}",
                             removed ? "it removes the condition" : "it lowers the statistic",
                             treat_diverged_alone ? " (a treatment seed diverged)" : "", numbers);
      return v;
    }
    v.verdict = "confirmed";
    v.reason = half_c ? fmt::format(
                            "the condition came back in {} of {} control seeds and in {} "
                            "treatment seeds; {}",
                            v.control_present, K, v.treatment_present, numbers)
                      : numbers;
    return v;
  }
  if (std::isfinite(v.diff_mean) && std::isfinite(v.spread) && sd.n >= 2 &&
      -v.diff_mean > v.spread) {
    v.verdict = "not confirmed";
    v.reason = "the treatment makes the statistic worse beyond the seed spread; " + numbers;
    return v;
  }
  v.verdict = "inconclusive";
  v.reason = (half_c ? fmt::format("the condition came back in {} of {} control seeds and {} of "
                                   "{} treatment seeds; ",
                                   v.control_present, K, v.treatment_present, K)
                     : std::string()) +
             "the difference is within the seed spread: " + numbers;
  return v;
}

nlohmann::json to_json(const ConfirmPlan& p) {
  nlohmann::json arms = nlohmann::json::array();
  for (const auto& a : p.arms) {
    nlohmann::json set = nlohmann::json::object();
    for (const auto& [k, v] : a.set) set[k] = v;
    arms.push_back({{"name", a.name}, {"remedy", a.remedy}, {"set", set}});
    if (!a.cannot.empty()) arms.back()["cannot"] = a.cannot;
  }
  return {{"problem", p.problem.kind},
          {"statistic", p.problem.statistic},
          {"threshold", num_or_null(confirm_default_threshold(p.problem.statistic).value_or(NAN))},
          {"onset_step", p.problem.onset_step},
          {"start_step", p.start_step},
          {"start_checkpoint", p.start_checkpoint},
          {"start_why", p.start_why},
          {"window_end", p.window_end},
          {"window_why", p.window_why},
          {"seeds", p.seeds},
          {"arms", arms},
          {"estimated_steps", p.estimated_steps()},
          {"notes", p.notes}};
}

nlohmann::json to_json(const Confirmation& c) {
  nlohmann::json j = to_json(c.plan);
  j["replay_check"] = c.replay_check;
  j["replay_bitwise"] = c.replay_bitwise;
  if (!c.command_note.empty()) j["command_note"] = c.command_note;
  nlohmann::json arms = nlohmann::json::array();
  for (const auto& a : c.arms) {
    nlohmann::json stat = nlohmann::json::array(), loss = nlohmann::json::array();
    for (double x : a.stat) stat.push_back(num_or_null(x));
    for (double x : a.loss_end) loss.push_back(num_or_null(x));
    arms.push_back({{"name", a.name},
                    {"remedy", a.remedy},
                    {"statistic", stat},
                    {"loss_end", loss},
                    {"status", a.status},
                    {"statistic_stats", seed_stats_json(seed_stats(a.stat))},
                    {"loss_end_stats", seed_stats_json(seed_stats(a.loss_end))}});
  }
  j["arm_results"] = arms;
  nlohmann::json verdicts = nlohmann::json::array();
  for (std::size_t i = 0; i < c.verdicts.size(); ++i) {
    const RemedyVerdict& v = c.verdicts[i];
    verdicts.push_back({{"arm", c.arms[i + 1].name},
                        {"remedy", c.arms[i + 1].remedy},
                        {"verdict", v.verdict},
                        {"reason", v.reason},
                        {"control_present", v.control_present},
                        {"treatment_present", v.treatment_present},
                        {"seeds", v.seeds},
                        {"diff_mean", num_or_null(v.diff_mean)},
                        {"spread", num_or_null(v.spread)},
                        {"loss_diff", num_or_null(v.loss_diff)},
                        {"loss_spread", num_or_null(v.loss_spread)}});
  }
  j["verdicts"] = verdicts;
  return j;
}

}  // namespace normlab
