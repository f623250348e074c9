// doctor's output-logit divergence check: mean log Z drifting away from its step-1 value, or the
// largest output logit past its threshold (z-loss, a final soft-cap or weight decay).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

// ---- output-logit divergence ---------------------------------------------------------------
void check_output_logits(const Run& r, std::vector<DoctorFinding>& out) {
  double base = NAN, drift = 0, at = NAN, maxlog = -1, maxlog0 = NAN;
  long drift_step = 0, maxlog_step = 0, first = 0, last = 0, held = 0;
  for (const json* j : r.steps) {
    const double z = num(*j, metric::log_z_mean);
    const long s = j->value(metric::step, 0L);
    if (!std::isfinite(z)) continue;
    if (std::isnan(base)) base = z;
    const double d = std::fabs(z - base);
    if (d > drift) drift = d, at = z, drift_step = s;
    if (d >= T::kLogZDrift) {
      if (!first) first = s;
      last = s;
      ++held;
    }
  }
  // A single excursion during a loss spike is the spike's; divergence is a drift that holds.
  if (held < T::kLogZDriftSteps) first = last = 0;
  for (const json* j : r.diag) {
    const double m = num(*j, metric::max_logit_raw);
    const long s = j->value(metric::step, 0L);
    if (!std::isfinite(m)) continue;
    if (std::isnan(maxlog0)) maxlog0 = m;
    if (m > maxlog) maxlog = m, maxlog_step = s;
    if (m >= T::kOutputLogit) {
      if (!first || s < first) first = s;
      last = std::max(last, s);
    }
  }
  if (!first) return;
  DoctorFinding f;
  f.kind = "output_logit_divergence";
  f.severity = "problem";
  f.first_step = first;
  f.last_step = last;
  f.title = fmt::format(
      "output-logit divergence: mean log Z moved {} nats from its step-1 value "
      "(to {} at step {})",
      g(drift), g(at), drift_step);
  f.evidence.push_back(fmt::format(
      "mean log Z (logsumexp of the output logits) was {} at step 1 (log V = {} for uniform "
      "logits) and {} at step {}: {} nats away; at least {} nats away on {} logged steps from step "
      "{} to step {}",
      g(base), g(std::log(static_cast<double>(r.cfg.model.vocab_size))), g(at), drift_step,
      g(drift), g(T::kLogZDrift), held, first, last));
  if (maxlog >= 0)
    f.evidence.push_back(fmt::format("largest output logit (before any final cap) {} at step {}{}",
                                     g(maxlog), maxlog_step, factor(maxlog, maxlog0)));
  const Config& c = r.cfg;
  // z-loss at 1e-4 (PaLM's), or the run's own coefficient when it has one (then it is tried).
  const std::string z =
      r.knows("train.z_loss") && c.train.z_loss > 0 ? num_text(c.train.z_loss) : "1e-4";
  f.remedies.push_back(config_remedy(
      r,
      fmt::format("z-loss: --set train.z_loss={} (penalizes log^2 Z so the logits keep their "
                  "offset; PaLM, Wortsman et al. 2023; normlab's finding 5 (\"z-loss 0 vs "
                  "1e-4\"): it stopped log Z's drift)",
                  z),
      {{"train.z_loss", z}}));
  if (r.knows("train.z_loss") && c.train.z_loss > 0)
    f.remedies.push_back(config_remedy(
        r,
        fmt::format("a stronger z-loss: --set train.z_loss={} (now {})",
                    fmt::format("{:.3g}", c.train.z_loss * 10), g(c.train.z_loss)),
        {{"train.z_loss", fmt::format("{:.3g}", c.train.z_loss * 10)}}));
  f.remedies.push_back(lower_lr(r, c.optim.lr / 3));
  const std::string cap = r.knows("model.final_softcap") && c.model.final_softcap > 0
                              ? num_text(c.model.final_softcap)
                              : "30";
  f.remedies.push_back(config_remedy(
      r,
      fmt::format("or a final soft-cap: --set model.final_softcap={} (Gemma 2's 30; bounds the "
                  "output logits)",
                  cap),
      {{"model.final_softcap", cap}}));
  if (r.knows("optim.weight_decay") && c.optim.weight_decay <= 0)
    f.remedies.push_back(config_remedy(
        r,
        "weight decay is off (optim.weight_decay = 0): Wortsman et al. 2023 find output-logit "
        "divergence when it is; --set optim.weight_decay=0.1",
        {{"optim.weight_decay", "0.1"}}));
  f.confirm.push_back(fmt::format(
      "rerun with the remedy: log_z_mean (every step line) should stay within {} nats of its "
      "step-1 value, and max_logit_raw (diagnostics) below {}",
      g(T::kLogZDrift), g(T::kOutputLogit)));
  f.values = {{"step1_log_z_mean", base},
              {"log_z_mean", at},
              {"log_z_drift", drift},
              {"step", drift_step},
              {"max_logit_raw", maxlog >= 0 ? json(maxlog) : json(nullptr)},
              {"max_logit_raw_step", maxlog_step}};
  f.values["statistic"] = held >= T::kLogZDriftSteps
                              ? statistic("log_z_drift", drift, T::kLogZDrift, first)
                              : statistic("max_logit_raw", maxlog, T::kOutputLogit, first);
  out.push_back(std::move(f));
}

}  // namespace normlab::doctor_detail
