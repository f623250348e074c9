// doctor's optimizer checks (#36), on diagnostics records before a loss spike:
// - second_moment_underestimate: RMS(g^2 / v_hat) of some tensor (rms_g2v_max) at or above
//   kSecondMoment 1 to kSpikeLead steps before a loss spike: the second moment had not seen
//   a gradient that large, so Adam's update was large too (Wortsman et al. 2023b). Remedy:
//   StableAdamW's per-tensor update clipping, or a lower beta2 (a second moment that follows the
//   gradient faster).
// - update_spikes: the RMS of a group's update (update_rms) at or above kUpdateSpike times the
//   median of its earlier values, 1 to kSpikeLead steps before a loss spike.
// Both read the loss spikes check_spikes found (it runs before them in doctor.cpp's table).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

namespace {

// The loss spikes' steps from check_spikes' finding (empty when there is none).
std::vector<long> loss_spike_steps(const std::vector<DoctorFinding>& out) {
  std::vector<long> steps;
  for (const DoctorFinding& f : out)
    if (f.kind == "loss_spikes")
      for (const json& s : f.values.value("spikes", json::array())) steps.push_back(s.value("step", 0L));
  return steps;
}

// The first loss spike 1 to kSpikeLead steps after step s (after: the loss of a step is measured
// before its update, so a spike at s itself came first); 0 when none.
long spike_after(const std::vector<long>& spikes, long s) {
  for (long sp : spikes)
    if (sp > s && sp <= s + T::kSpikeLead) return sp;
  return 0;
}

Remedy beta2_remedy(const Run& r) {
  const Config& c = r.cfg;
  if (!r.knows("optim.beta2"))
    return advice(r, "or a second moment that follows the gradient faster: a lower beta2 (the "
                     "run's own is unknown)");
  const double lower = c.optim.beta2 > 0.95 ? 0.95 : 0.9;
  return config_remedy(
      r,
      fmt::format(
          "or a second moment that follows the gradient faster: --set optim.beta2={:g} (now {:g})",
          lower, c.optim.beta2),
      {{"optim.beta2", num_text(lower)}});
}

}  // namespace

void check_optimizer(const Run& r, std::vector<DoctorFinding>& out) {
  const std::vector<long> spikes = loss_spike_steps(out);
  if (spikes.empty() || r.diag.empty()) return;
  const Config& c = r.cfg;

  // ---- the second moment underestimating the gradient ----
  struct Hit {
    long step, spike;
    double value;
    std::string tensor;
  };
  std::vector<Hit> hits;
  double base = NAN;
  for (const json* j : r.diag) {
    const double v = num(*j, metric::rms_g2v_max);
    if (!std::isfinite(v)) continue;
    if (std::isnan(base)) base = v;
    const long s = j->value(metric::step, 0L);
    if (v < T::kSecondMoment) continue;
    if (const long sp = spike_after(spikes, s))
      hits.push_back({s, sp, v, j->value(metric::rms_g2v_max_tensor, std::string("?"))});
  }
  if (!hits.empty()) {
    const Hit& w = *std::max_element(hits.begin(), hits.end(),
                                     [](const Hit& a, const Hit& b) { return a.value < b.value; });
    DoctorFinding f;
    f.kind = "second_moment_underestimate";
    f.severity = "problem";
    f.first_step = hits.front().step;
    f.last_step = hits.back().spike;
    f.title = fmt::format(
        "the second moment underestimated the gradient before the loss spike at step {}: "
        "RMS(g^2/v) {} in {} at step {}",
        w.spike, g(w.value), w.tensor, w.step);
    std::string list;
    for (std::size_t i = 0; i < hits.size() && i < 6; ++i)
      list += fmt::format("{}step {}: {} in {} (loss spike at step {})", i ? ", " : "",
                          hits[i].step, g(hits[i].value), hits[i].tensor, hits[i].spike);
    f.evidence.push_back(fmt::format(
        "RMS of g^2 / v_hat (rms_g2v_max: the gradient against the optimizer's bias-corrected "
        "second moment, about 1 in steady training; first diagnostics step {}) at or above {} at "
        "or up to {} steps before a loss spike: {}",
        g(base), g(T::kSecondMoment), T::kSpikeLead, list));
    if (r.knows("optim.beta1") && r.knows("optim.beta2"))
      f.evidence.push_back(fmt::format(
          "Adam's update divides by sqrt(v_hat): a gradient its second moment has not seen moves "
          "that tensor by up to (1 - beta1) / sqrt(1 - beta2) = {} times the learning rate per "
          "element in one step (optim.beta1 = {:g}, optim.beta2 = {:g})",
          g((1 - c.optim.beta1) / std::sqrt(1 - c.optim.beta2)), c.optim.beta1, c.optim.beta2));
    f.remedies.push_back(config_remedy(
        r,
        "per-tensor update clipping: --set optim.name=stable_adamw (StableAdamW divides each "
        "tensor's learning rate by max(1, RMS(g^2/v)), Wortsman et al. 2023b)",
        {{"optim.name", "stable_adamw"}}));
    f.remedies.push_back(beta2_remedy(r));
    f.confirm.push_back(phrase(
        r, fmt::format("rerun with the remedy and --set diag.interval=1 over steps {}-{}: "
                       "rms_g2v_max should stay below {} and the loss should not spike",
                       f.first_step, f.last_step, g(T::kSecondMoment))));
    json l = json::array();
    for (const Hit& h : hits)
      l.push_back({{"step", h.step}, {"rms_g2v", h.value}, {"tensor", h.tensor}, {"loss_spike", h.spike}});
    f.values = {{"events", l}, {"first_rms_g2v", std::isfinite(base) ? json(base) : json(nullptr)}};
    f.values["statistic"] = statistic("rms_g2v_max", w.value, T::kSecondMoment, f.first_step);
    out.push_back(std::move(f));
  }

  // ---- update-norm spikes ----
  struct UpdateHit {
    long step, spike;
    std::string group;
    double value, median;
  };
  std::vector<UpdateHit> ups;
  std::map<std::string, std::vector<double>> history;  // group -> update_rms before
  for (const json* j : r.diag) {
    const auto it = j->find(metric::update_rms);
    if (it == j->end() || !it->is_object()) continue;
    const long s = j->value(metric::step, 0L);
    for (const auto& [grp, val] : it->items()) {
      if (!val.is_number()) continue;
      const double v = val.get<double>();
      auto& h = history[grp];
      const double med = median(h);
      if (static_cast<int>(h.size()) >= T::kGradSpikeHistory && med > 0 &&
          v >= T::kUpdateSpike * med)
        if (const long sp = spike_after(spikes, s)) ups.push_back({s, sp, grp, v, med});
      h.push_back(v);
    }
  }
  if (!ups.empty()) {
    const UpdateHit& w = *std::max_element(
        ups.begin(), ups.end(),
        [](const UpdateHit& a, const UpdateHit& b) { return a.value / a.median < b.value / b.median; });
    DoctorFinding f;
    f.kind = "update_spikes";
    f.severity = "problem";
    f.first_step = ups.front().step;
    f.last_step = ups.back().spike;
    f.title = fmt::format("update-norm spike before the loss spike at step {}: the {} update's RMS "
                          "{}x its median at step {}",
                          w.spike, w.group, g(w.value / w.median), w.step);
    std::string list;
    for (std::size_t i = 0; i < ups.size() && i < 6; ++i)
      list += fmt::format("{}step {}: {} update RMS {} ({}x the median {} before it; loss spike "
                          "at step {})",
                          i ? ", " : "", ups[i].step, ups[i].group, g(ups[i].value),
                          g(ups[i].value / ups[i].median), g(ups[i].median), ups[i].spike);
    f.evidence.push_back(fmt::format(
        "update_rms at or above {}x the median of its earlier diagnostics values, at or up to {} "
        "steps before a loss spike: {}",
        g(T::kUpdateSpike), T::kSpikeLead, list));
    f.remedies.push_back(config_remedy(
        r,
        "bound each tensor's update: --set optim.name=stable_adamw (per-tensor update clipping)",
        {{"optim.name", "stable_adamw"}}));
    f.remedies.push_back(config_remedy(
        r, "or --set optim.name=muon (an orthogonalised update has a fixed RMS)",
        {{"optim.name", "muon"}}));
    f.remedies.push_back(lower_lr(r, c.optim.lr / 3));
    if (r.knows("optim.grad_clip") && c.optim.grad_clip <= 0)
      f.remedies.push_back(config_remedy(
          r, "clip the gradient: --set optim.grad_clip=1 (it is off)", {{"optim.grad_clip", "1"}}));
    f.confirm.push_back(phrase(
        r, fmt::format("rerun with --set diag.interval=1 over steps {}-{}: update_rms should stay "
                       "within {}x its median",
                       f.first_step, f.last_step, g(T::kUpdateSpike))));
    json l = json::array();
    for (const UpdateHit& h : ups)
      l.push_back({{"step", h.step}, {"group", h.group}, {"update_rms", h.value},
                   {"median_before", h.median}, {"loss_spike", h.spike}});
    f.values = {{"events", l}};
    // The update's RMS against the median of its earlier values (a derived ratio).
    f.values["statistic"] =
        statistic("update_rms_ratio", w.value / w.median, T::kUpdateSpike, f.first_step);
    out.push_back(std::move(f));
  }
}

}  // namespace normlab::doctor_detail
