// doctor's guard events check: non-finite steps (a problem) and the steps the spike guard skipped
// or rolled back (a note, a problem with rollbacks).
#include <fmt/format.h>

#include <algorithm>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

// ---- guard events --------------------------------------------------------------------------
void check_guard(const Run& r, std::vector<DoctorFinding>& out) {
  const std::string& end_reason = r.end_reason;
  const std::string& end_detail = r.end_detail;
  std::vector<long> nonfinite, skipped_finite;
  long nf_skipped = 0;
  for (const json* j : r.steps) {
    const long s = j->value(metric::step, 0L);
    if (j->value(metric::nonfinite, false)) {
      nonfinite.push_back(s);
      nf_skipped += j->value(metric::skipped, false);
    } else if (j->value(metric::skipped, false)) {
      skipped_finite.push_back(s);
    }
  }
  auto steps_list = [](const std::vector<long>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < 10; ++i)
      s += fmt::format("{}{}", i ? ", " : "", v[i]);
    if (v.size() > 10) s += ", ...";
    return s;
  };
  const long total_skipped = r.steps.empty() ? 0 : r.steps.back()->value(metric::skipped_total, 0L);
  if (!nonfinite.empty() ||
      (end_reason == "diverged" && end_detail.find("finite") != std::string::npos)) {
    DoctorFinding f;
    f.kind = "nonfinite_steps";
    f.severity = "problem";
    f.first_step = nonfinite.empty() ? 0 : nonfinite.front();
    f.last_step = nonfinite.empty() ? 0 : nonfinite.back();
    f.title =
        fmt::format("{} non-finite step{} (loss or gradient NaN/inf), {} skipped by the guard",
                    nonfinite.size(), nonfinite.size() == 1 ? "" : "s", nf_skipped);
    if (!nonfinite.empty())
      f.evidence.push_back(fmt::format("non-finite loss or gradient norm at step{} {}",
                                       nonfinite.size() == 1 ? "" : "s", steps_list(nonfinite)));
    f.evidence.push_back(fmt::format("the guard skipped {} update{} in all (skipped_total)",
                                     total_skipped, total_skipped == 1 ? "" : "s"));
    if (end_reason == "diverged")
      f.evidence.push_back("the run stopped as diverged: " + end_detail);
    f.remedies.push_back(advice(r,
                                "non-finite values come from one of the instabilities above when "
                                "doctor lists one (fix that first); otherwise lower the learning "
                                "rate and check the data around those steps"));
    if (!r.torch())
      f.remedies.push_back(config_remedy(r,
                                         "--set train.spike_policy=rollback goes back to the last "
                                         "checkpoint instead of only skipping the update",
                                         {{"train.spike_policy", "rollback"}}));
    f.confirm.push_back(
        r.torch() ? std::string("rerun from a checkpoint saved before the first one with "
                                "Probe(..., interval=1) and watch which signal (attn_max_logit, "
                                "log_z_mean, resid_rms, grad_norm_block) grows first")
                  : std::string("resume from the checkpoint before the first one with --set "
                                "train.log_interval=1 --set diag.interval=1 and watch which "
                                "signal (attn_max_logit, log_z_mean, resid_rms, grad_norm_block) "
                                "grows first"));
    json l = json::array();
    for (long s : nonfinite) l.push_back(s);
    f.values = {{"nonfinite_steps", l},
                {"skipped_nonfinite", nf_skipped},
                {"skipped_total", total_skipped}};
    f.values["statistic"] = statistic("nonfinite_count", static_cast<double>(nonfinite.size()), 1,
                                      f.first_step);
    out.push_back(std::move(f));
  }
  if (!skipped_finite.empty() || !r.rollbacks.empty()) {
    DoctorFinding f;
    f.kind = "guard_events";
    f.severity = r.rollbacks.empty() ? "note" : "problem";
    f.first_step = skipped_finite.empty() ? 0 : skipped_finite.front();
    f.last_step = skipped_finite.empty() ? 0 : skipped_finite.back();
    for (const json* j : r.rollbacks) {
      const long s = j->value(metric::step, 0L);
      if (!f.first_step || s < f.first_step) f.first_step = s;
      f.last_step = std::max(f.last_step, s);
    }
    f.title = fmt::format("guard: {} finite step{} skipped as spikes, {} rollback{}",
                          skipped_finite.size(), skipped_finite.size() == 1 ? "" : "s",
                          r.rollbacks.size(), r.rollbacks.size() == 1 ? "" : "s");
    if (!skipped_finite.empty())
      f.evidence.push_back(fmt::format(
          "the spike guard (z-score above train.spike_threshold = {} against the last {} steps) "
          "skipped step{} {}",
          g(r.cfg.train.spike_threshold), r.cfg.train.spike_window,
          skipped_finite.size() == 1 ? "" : "s", steps_list(skipped_finite)));
    for (std::size_t i = 0; i < r.rollbacks.size() && i < 5; ++i)
      f.evidence.push_back(fmt::format(
          "rollback at step {} to step {} (loss {}, gradient norm {})",
          r.rollbacks[i]->value(metric::step, 0L), r.rollbacks[i]->value(metric::to_step, 0L),
          g(num(*r.rollbacks[i], metric::loss)), g(num(*r.rollbacks[i], metric::grad_norm))));
    f.remedies.push_back(advice(
        r, r.rollbacks.empty() ? "a few skipped steps in a noisy small-batch run are normal; "
                                 "many, or in a row, point to the instabilities above"
                               : "repeated rollbacks mean the run keeps reaching the same bad "
                                 "region: lower the learning rate or fix the instability listed"));
    f.confirm.push_back("the skipped and spike fields of the step lines show each event");
    f.values = {{"skipped_finite", skipped_finite.size()},
                {"rollbacks", r.rollbacks.size()},
                {"skipped_total", total_skipped}};
    if (!r.rollbacks.empty())
      f.values["statistic"] = statistic("rollbacks", static_cast<double>(r.rollbacks.size()), 1,
                                        f.first_step);
    out.push_back(std::move(f));
  }
}

}  // namespace normlab::doctor_detail
