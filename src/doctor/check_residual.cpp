// doctor's residual-stream growth check: the RMS of the residual stream at some boundary past its
// threshold, with the profile by depth at the peak (Peri-Norm is the remedy). Not for nGPT, whose
// stream is normalised by construction.
#include <fmt/format.h>

#include <cmath>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

// ---- residual-stream growth ----------------------------------------------------------------
void check_residual(const Run& r, std::vector<DoctorFinding>& out) {
  // nGPT keeps every hidden state on the unit sphere (RMS 1 / sqrt(d_model) by construction):
  // its stream cannot grow, and Peri-Norm is no remedy for it.
  if (r.cfg.model.placement == Placement::ngpt) return;
  double peak = -1;
  long peak_step = 0, first = 0, last = 0;
  std::size_t peak_k = 0;
  const json* peak_rec = nullptr;
  for (const json* j : r.diag) {
    const auto v = vec(*j, metric::resid_rms);
    const long s = j->value(metric::step, 0L);
    bool bad = false;
    for (std::size_t k = 0; k < v.size(); ++k) {
      if (!std::isfinite(v[k])) continue;
      if (v[k] > peak) peak = v[k], peak_step = s, peak_k = k, peak_rec = j;
      bad |= v[k] >= T::kResidRms;
    }
    if (bad) {
      if (!first) first = s;
      last = s;
    }
  }
  if (!first || !peak_rec) return;
  const auto v = vec(*peak_rec, metric::resid_rms);
  const auto mx = vec(*peak_rec, metric::resid_max);
  const auto v0 = vec(*r.diag.front(), metric::resid_rms);
  DoctorFinding f;
  f.kind = "residual_growth";
  f.severity = "problem";
  f.first_step = first;
  f.last_step = last;
  f.title = fmt::format("residual-stream growth: RMS {} {} at step {}", g(peak), boundary(peak_k),
                        peak_step);
  std::string prof;
  for (std::size_t k = 0; k < v.size(); ++k) prof += fmt::format("{}{}", k ? ", " : "", g(v[k]));
  f.evidence.push_back(
      fmt::format("residual RMS by depth at step {} (embedding first, then after "
                  "each attention and each block): {}",
                  peak_step, prof));
  if (v.size() > 1 && v[1] > 0)
    f.evidence.push_back(fmt::format("{}x from after block 0's attention to {}",
                                     g(v[peak_k] / v[1]), boundary(peak_k)));
  if (peak_k < v0.size())
    f.evidence.push_back(fmt::format("{}x its step-1 value {} at the same boundary",
                                     g(v[peak_k] / v0[peak_k]), g(v0[peak_k])));
  if (peak_k < mx.size() && v[peak_k] > 0)
    f.evidence.push_back(fmt::format("largest |x| there {} ({}x the RMS)", g(mx[peak_k]),
                                     g(mx[peak_k] / v[peak_k])));
  f.evidence.push_back(
      fmt::format("at or above RMS {} from step {} to step {}", g(T::kResidRms), first, last));
  const Config& c = r.cfg;
  f.remedies.push_back(config_remedy(
      r,
      fmt::format("Peri-Norm: --set model.placement=peri (now {}): a norm on each sublayer's "
                  "output before the add bounds what every block adds to the stream (Kim et al. "
                  "2025, \"Peri-LN\"), where Pre-Norm lets it grow with depth and learning rate",
                  r.knows("model.placement") ? to_string(c.model.placement) : "unknown"),
      {{"model.placement", "peri"}}));
  f.remedies.push_back(lower_lr(r, c.optim.lr / 3));
  f.confirm.push_back(
      fmt::format("rerun with the remedy and diagnostics on: resid_rms should stay "
                  "below {} at every boundary; resid_max / resid_rms shows whether "
                  "a few massive activations carry it",
                  g(T::kResidRms)));
  f.values = {{"max_resid_rms", peak}, {"step", peak_step}, {"boundary", peak_k}, {"resid_rms", v}};
  f.values["statistic"] = statistic("resid_rms", peak, T::kResidRms, first);
  out.push_back(std::move(f));
}

}  // namespace normlab::doctor_detail
