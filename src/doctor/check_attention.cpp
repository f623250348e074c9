// doctor's attention-logit growth check: the largest |q.k| score of any layer, or a layer's mean
// attention entropy, past its threshold (QK-Norm or a soft-cap is the remedy).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "doctor/doctor_detail.h"
#include "normlab/config.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

// ---- attention-logit growth ----------------------------------------------------------------
void check_attention(const Run& r, std::vector<DoctorFinding>& out) {
  if (r.diag.empty()) return;
  double peak = -1, base = NAN, ent0 = NAN, ent_min = INFINITY;
  long peak_step = 0, ent_step = 0, first = 0, last = 0;
  int peak_layer = -1, ent_layer = -1;
  for (const json* j : r.diag) {
    const auto a = vec(*j, metric::attn_max_logit), e = vec(*j, metric::attn_entropy);
    const long s = j->value(metric::step, 0L);
    if (std::isnan(base) && !a.empty()) base = *std::max_element(a.begin(), a.end());
    if (std::isnan(ent0) && !e.empty()) ent0 = *std::min_element(e.begin(), e.end());
    bool bad = false;
    for (std::size_t l = 0; l < a.size(); ++l) {
      if (!std::isfinite(a[l])) continue;
      if (a[l] > peak) peak = a[l], peak_step = s, peak_layer = static_cast<int>(l);
      bad |= a[l] >= T::kAttnLogit;
    }
    for (std::size_t l = 0; l < e.size(); ++l) {
      if (!std::isfinite(e[l])) continue;
      if (e[l] < ent_min) ent_min = e[l], ent_step = s, ent_layer = static_cast<int>(l);
      bad |= e[l] < T::kAttnEntropyCollapse;
    }
    if (bad) {
      if (!first) first = s;
      last = s;
    }
  }
  if (!first) return;
  DoctorFinding f;
  f.kind = "attention_logit_growth";
  f.severity = "problem";
  f.first_step = first;
  f.last_step = last;
  // Which head: from the per-head record of the peak step, when diag.per_head was on.
  int head = -1;
  for (const json* j : r.diag)
    if (j->value(metric::step, 0L) == peak_step && j->contains(metric::attn_max_logit_head)) {
      const auto& row = (*j)[metric::attn_max_logit_head][peak_layer];
      double best = -1;
      for (std::size_t h = 0; h < row.size(); ++h)
        if (row[h].is_number() && row[h].get<double>() > best)
          best = row[h].get<double>(), head = static_cast<int>(h);
    }
  f.title =
      fmt::format("attention-logit growth: max attention logit {} in layer {}{} at step {}",
                  g(peak), peak_layer, head >= 0 ? fmt::format(" head {}", head) : "", peak_step);
  f.evidence.push_back(fmt::format(
      "largest |q.k| attention score (before any cap) reached {} at step {} in layer {}{}{}; "
      "it was at or above {} (or an entropy below {} nats) from step {} to step {}",
      g(peak), peak_step, peak_layer, head >= 0 ? fmt::format(" head {}", head) : "",
      factor(peak, base), g(T::kAttnLogit), g(T::kAttnEntropyCollapse), first, last));
  if (std::isfinite(ent_min))
    f.evidence.push_back(fmt::format(
        "mean attention entropy fell to {} nats in layer {} at step {} (step 1: {} nats): {}",
        g(ent_min), ent_layer, ent_step, g(ent0),
        ent_min < T::kAttnEntropyCollapse ? "the attention has collapsed onto single keys"
                                          : "not collapsed"));
  if (head < 0 && !r.diag.empty() && !r.diag.front()->contains(metric::attn_max_logit_head))
    f.evidence.push_back(r.torch() ? "which head: unknown (the probe ran without per_head=True)"
                                   : "which head: unknown (diag.per_head = false)");
  const Config& c = r.cfg;
  if (r.knows("optim.name") && c.optim.name == OptimizerKind::muon && c.optim.qk_clip <= 0)
    f.remedies.push_back(config_remedy(
        r,
        fmt::format(
            "QK-Clip: --set optim.qk_clip=100 (Kimi K2's MuonClip: after each step, the query and "
            "key projections of every head whose largest logit exceeded 100 are rescaled to bring "
            "it back; it keeps Muon's logits bounded without changing the architecture; the "
            "largest logit here was {})",
            g(peak)),
        {{"optim.qk_clip", "100"}}));
  else if (r.knows("optim.qk_clip") && c.optim.qk_clip > 0)
    f.remedies.push_back(config_remedy(
        r,
        fmt::format("QK-Clip is on at optim.qk_clip = {}: the logits above grew past it between "
                    "clips; a lower threshold clips earlier: --set optim.qk_clip={}",
                    g(c.optim.qk_clip), fmt::format("{:.3g}", c.optim.qk_clip / 2)),
        {{"optim.qk_clip", fmt::format("{:.3g}", c.optim.qk_clip / 2)}}));
  // QK-Norm of the kind the run has (then it is tried), else RMSNorm.
  const std::string qk = r.knows("model.qk_norm") && c.model.qk_norm != QKNormKind::none
                             ? std::string(to_string(c.model.qk_norm))
                             : "rmsnorm";
  f.remedies.push_back(config_remedy(
      r,
      fmt::format("QK-Norm: --set model.qk_norm={} (normalizes queries and keys per head, so the "
                  "logits cannot grow with the weights; Dehghani et al. 2023, Wortsman et al. "
                  "2023). normlab's finding 4 (\"Pre-Norm with and without QK-Norm\"): the "
                  "largest logit at lr 0.3 fell from 34,570 to 135 and the learning-rate "
                  "sensitivity halved",
                  qk),
      {{"model.qk_norm", qk}}));
  f.remedies.push_back(lower_lr(r, c.optim.lr / 3));
  const std::string cap = r.knows("model.attn_softcap") && c.model.attn_softcap > 0
                              ? num_text(c.model.attn_softcap)
                              : "50";
  f.remedies.push_back(config_remedy(
      r,
      fmt::format("or an attention soft-cap: --set model.attn_softcap={} (Gemma 2's value 50; "
                  "bounds the logits, at a small cost when it binds: finding 6)",
                  cap),
      {{"model.attn_softcap", cap}}));
  f.confirm.push_back(fmt::format(
      "rerun with the remedy and {}: attn_max_logit should stay below {} and attn_entropy above "
      "{} in every layer",
      r.torch() ? "Probe(..., interval=10, per_head=True)"
                : "--set diag.interval=10 --set diag.per_head=true",
      g(T::kAttnLogit), g(T::kAttnEntropyCollapse)));
  if (!r.torch())
    f.confirm.push_back(fmt::format(
        "normlab sweep --grid model.qk_norm=none,rmsnorm --grid optim.lr=... around lr {} "
        "compares the two by their final loss",
        lr_text(r)));
  f.values = {{"max_attn_logit", peak},
              {"step", peak_step},
              {"layer", peak_layer},
              {"head", head >= 0 ? json(head) : json(nullptr)},
              {"step1_max_attn_logit", std::isfinite(base) ? json(base) : json(nullptr)},
              {"min_attn_entropy", std::isfinite(ent_min) ? json(ent_min) : json(nullptr)},
              {"min_attn_entropy_layer", ent_layer},
              {"min_attn_entropy_step", ent_step}};
  // The statistic that named it: the largest logit, or, when only the entropy collapsed, that.
  f.values["statistic"] =
      peak >= T::kAttnLogit || !(ent_min < T::kAttnEntropyCollapse)
          ? statistic("attn_max_logit", peak, T::kAttnLogit, first)
          : statistic("attn_entropy", ent_min, T::kAttnEntropyCollapse, first, "below");
  out.push_back(std::move(f));
}

}  // namespace normlab::doctor_detail
