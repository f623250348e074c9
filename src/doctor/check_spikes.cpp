// doctor's loss and gradient-norm spike check: losses far above the lowest loss before them (a
// problem) and gradient-norm spikes without a loss spike (a note).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

// ---- loss and gradient-norm spikes ---------------------------------------------------------
void check_spikes(const Run& r, std::vector<DoctorFinding>& out) {
  double min_loss = INFINITY;
  std::vector<double> gn_hist;
  struct Spike {
    long step;
    double loss, before, grad, grad_median;
  };
  std::vector<Spike> spikes;
  std::vector<std::pair<long, double>> grad_only;  // step, factor
  std::vector<std::pair<long, double>> grad_spikes;
  for (const json* j : r.steps) {
    const long s = j->value(metric::step, 0L);
    const double loss = num(*j, metric::loss), gn = num(*j, metric::grad_norm);
    const double gmed = median(gn_hist);
    const bool gspike = std::isfinite(gn) &&
                        static_cast<int>(gn_hist.size()) >= T::kGradSpikeHistory && gmed > 0 &&
                        gn >= T::kGradSpikeFactor * gmed;
    if (gspike) grad_spikes.push_back({s, gn / gmed});
    bool lspike = false;
    if (std::isfinite(loss) && std::isfinite(min_loss) &&
        loss - min_loss >= std::max(T::kSpikeNats, T::kSpikeFraction * min_loss)) {
      spikes.push_back({s, loss, min_loss, gn, gmed});
      lspike = true;
    }
    if (gspike && !lspike) grad_only.push_back({s, gn / gmed});
    if (std::isfinite(loss)) min_loss = std::min(min_loss, loss);
    if (std::isfinite(gn)) gn_hist.push_back(gn);
  }
  const Config& c = r.cfg;
  if (!spikes.empty()) {
    DoctorFinding f;
    f.kind = "loss_spikes";
    f.severity = "problem";
    f.first_step = spikes.front().step;
    f.last_step = spikes.back().step;
    const auto worst = *std::max_element(
        spikes.begin(), spikes.end(),
        [](const Spike& a, const Spike& b) { return a.loss - a.before < b.loss - b.before; });
    f.title = spikes.size() == 1
                  ? fmt::format(
                        "loss spike at step {}: loss {}, {} nats above the lowest loss "
                        "before it ({})",
                        worst.step, g(worst.loss), g(worst.loss - worst.before), g(worst.before))
                  : fmt::format(
                        "loss spikes: {} logged steps from step {} to {}, worst {} at "
                        "step {} (lowest loss before it {})",
                        spikes.size(), f.first_step, f.last_step, g(worst.loss), worst.step,
                        g(worst.before));
    std::string list;
    for (std::size_t i = 0; i < spikes.size() && i < 8; ++i)
      list += fmt::format("{}step {}: loss {} (+{})", i ? ", " : "", spikes[i].step,
                          g(spikes[i].loss), g(spikes[i].loss - spikes[i].before));
    if (spikes.size() > 8) list += ", ...";
    f.evidence.push_back(fmt::format(
        "losses at least max({} nats, {} x that loss) above the lowest loss logged before them: {}",
        g(T::kSpikeNats), g(T::kSpikeFraction), list));
    // Gradient-norm spikes at or just before the loss spikes (within 5 steps).
    std::string with;
    long n_with = 0;
    for (const auto& [gs, fac] : grad_spikes)
      for (const auto& sp : spikes)
        if (gs <= sp.step && gs >= sp.step - 5) {
          if (n_with < 6)
            with +=
                fmt::format("{}step {} ({}x the median before it)", n_with ? ", " : "", gs, g(fac));
          ++n_with;
          break;
        }
    if (n_with)
      f.evidence.push_back(
          fmt::format("with gradient-norm spikes (>= {}x the median of the earlier "
                      "gradient norms) at or up to 5 steps before them: {}",
                      g(T::kGradSpikeFactor), with));
    else
      f.evidence.push_back(fmt::format("gradient norm at the worst spike: {} (median before it {})",
                                       g(worst.grad), g(worst.grad_median)));
    // Which layers first: the diagnostics record at or next after the first spike, per-layer
    // gradient norms against the first diagnostics record.
    const json* at = nullptr;
    for (const json* j : r.diag)
      if (j->value(metric::step, 0L) >= f.first_step) {
        at = j;
        break;
      }
    if (!at && !r.diag.empty()) at = r.diag.back();
    if (at && !r.diag.empty()) {
      const auto now = vec(*at, metric::grad_norm_block),
                 base = vec(*r.diag.front(), metric::grad_norm_block);
      std::vector<std::pair<double, int>> ratio;
      for (std::size_t l = 0; l < now.size() && l < base.size(); ++l)
        if (std::isfinite(now[l]) && base[l] > 0)
          ratio.push_back({now[l] / base[l], static_cast<int>(l)});
      std::sort(ratio.rbegin(), ratio.rend());
      std::string top;
      for (std::size_t i = 0; i < ratio.size() && i < 3; ++i)
        top += fmt::format("{}block {} ({}x)", i ? ", " : "", ratio[i].second, g(ratio[i].first));
      if (!top.empty())
        f.evidence.push_back(
            fmt::format("per-block gradient norms at step {} against step 1, "
                        "largest first: {}",
                        at->value(metric::step, 0L), top));
    }
    // When the run diverged, the divergence finding (first in the table) has chosen the learning
    // rate from evidence; one number, not two.
    const auto div = std::find_if(out.begin(), out.end(),
                                  [](const DoctorFinding& d) { return d.kind == "diverged"; });
    if (div != out.end() && div->values.value("suggested_lr", json()).is_number())
      f.remedies.push_back(lower_lr(r, div->values["suggested_lr"].get<double>(),
                                    "; as the divergence finding says"));
    else
      f.remedies.push_back(lower_lr(r, c.optim.lr / 3));
    if (!r.knows("optim.warmup_steps")) {
      const std::string w = std::to_string(std::max(10, c.train.steps / 10));
      f.remedies.push_back(config_remedy(
          r,
          fmt::format("a warmup, if it has none: --set optim.warmup_steps={} (about 5-10% of the "
                      "steps; the run's own warmup is unknown)",
                      w),
          {{"optim.warmup_steps", w}}));
    } else if (c.optim.warmup_steps < std::max(1, c.train.steps / 20)) {
      const std::string w = std::to_string(std::max(10, c.train.steps / 10));
      f.remedies.push_back(config_remedy(
          r,
          fmt::format("longer warmup: --set optim.warmup_steps={} (now {}; about 5-10% of "
                      "train.steps)",
                      w, c.optim.warmup_steps),
          {{"optim.warmup_steps", w}}));
    }
    if (r.knows("model.placement") &&
        (c.model.placement == Placement::post || c.model.placement == Placement::deepnorm))
      f.remedies.push_back(config_remedy(
          r,
          fmt::format("{}-Norm without warmup is the classic unstable case (Xiong et al. 2020): "
                      "switch to Pre-Norm or Peri-Norm (--set model.placement=pre or peri), "
                      "which normalize before the sublayer and keep gradients well-scaled at the "
                      "start",
                      c.model.placement == Placement::post ? "Post" : "DeepNorm's Post"),
          {{"model.placement", "pre"}}));
    if (!r.torch() && r.knows("train.spike_policy") && c.train.spike_policy == SpikePolicy::off)
      f.remedies.push_back(config_remedy(
          r, "meanwhile, let the guards contain them: --set train.spike_policy=skip (or rollback)",
          {{"train.spike_policy", "skip"}}));
    f.confirm.push_back(fmt::format(
        "rerun with {} over steps {}-{}: with the remedy no loss should rise {} nats above the "
        "running minimum",
        r.torch() ? "Probe(..., interval=1)" : "--set train.log_interval=1 --set diag.interval=1",
        f.first_step, f.last_step, g(T::kSpikeNats)));
    json list_j = json::array();
    for (const auto& sp : spikes)
      list_j.push_back({{"step", sp.step},
                        {"loss", sp.loss},
                        {"lowest_before", sp.before},
                        {"grad_norm", std::isfinite(sp.grad) ? json(sp.grad) : json(nullptr)}});
    f.values = {{"spikes", list_j}, {"gradient_spikes_with", n_with}};
    // The number of logged losses that spiked (>= 1 names the problem).
    f.values["statistic"] =
        statistic("spike_count", static_cast<double>(spikes.size()), 1, f.first_step, "at_least");
    out.push_back(std::move(f));
  }
  if (!grad_only.empty()) {
    DoctorFinding f;
    f.kind = "gradient_spikes";
    f.severity = "note";
    f.first_step = grad_only.front().first;
    f.last_step = grad_only.back().first;
    std::string list;
    for (std::size_t i = 0; i < grad_only.size() && i < 6; ++i)
      list +=
          fmt::format("{}step {} ({}x)", i ? ", " : "", grad_only[i].first, g(grad_only[i].second));
    f.title = fmt::format("{} gradient-norm spike{} without a loss spike", grad_only.size(),
                          grad_only.size() == 1 ? "" : "s");
    f.evidence.push_back(
        fmt::format("gradient norm >= {}x the median before it: {}", g(T::kGradSpikeFactor), list));
    f.evidence.push_back(
        c.optim.grad_clip > 0
            ? fmt::format("clipped to optim.grad_clip = {}; the loss did not spike",
                          g(c.optim.grad_clip))
            : std::string("gradient clipping is off (optim.grad_clip = 0)"));
    f.remedies.push_back(advice(r,
                                "none needed while the loss does not spike; repeated ones at one "
                                "layer are an early sign of the instabilities above"));
    f.confirm.push_back(std::string(r.torch() ? "Probe(..., interval=1)" : "diag.interval = 1") +
                        " around those steps shows which blocks' gradient norms "
                        "(grad_norm_block) jump");
    json l = json::array();
    for (const auto& [s, fac] : grad_only) l.push_back({{"step", s}, {"factor", fac}});
    f.values = {{"spikes", l}};
    out.push_back(std::move(f));
  }
}

}  // namespace normlab::doctor_detail
