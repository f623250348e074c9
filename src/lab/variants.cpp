#include "lab/variants.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace normlab {

std::vector<VariantSeeds> variant_seeds(const std::vector<SweepRun>& runs) {
  const bool seeded =
      std::any_of(runs.begin(), runs.end(), [](const SweepRun& r) { return r.point.seed > 0; });
  if (!seeded) return {};
  std::vector<VariantSeeds> out;
  std::vector<std::vector<const SweepRun*>> members;
  for (const SweepRun& r : runs) {
    std::string label;
    for (const auto& [k, v] : r.point.overrides) label += (label.empty() ? "" : ", ") + k + "=" + v;
    if (label.empty()) label = "all";
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const VariantSeeds& s) { return s.label == label; });
    if (it == out.end()) {
      VariantSeeds v;
      v.label = label;
      v.variant.insert(r.point.overrides.begin(), r.point.overrides.end());
      out.push_back(std::move(v));
      members.emplace_back();
      it = out.end() - 1;
    }
    members[static_cast<std::size_t>(it - out.begin())].push_back(&r);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::vector<double> fin, train, logit;
    for (const SweepRun* r : members[i]) {
      ++out[i].seeds;
      if (!r->final_loss) ++out[i].diverged;
      fin.push_back(r->final_loss.value_or(NAN));
      train.push_back(r->train_loss.value_or(NAN));
      logit.push_back(r->max_attn_logit.value_or(NAN));
    }
    // QK-Clip on in every run and never clipping a head in any.
    const auto& ms = members[i];
    const bool clip_on = std::all_of(ms.begin(), ms.end(),
                                     [](const SweepRun* r) { return r->qk_clip_tau > 0; });
    const bool idle = std::all_of(ms.begin(), ms.end(),
                                  [](const SweepRun* r) { return r->qk_clip_total == 0; });
    if (clip_on && idle) {
      double mx = NAN;
      for (const SweepRun* r : ms)
        if (!std::isnan(r->qk_clip_max_logit))
          mx = std::isnan(mx) ? r->qk_clip_max_logit : std::fmax(mx, r->qk_clip_max_logit);
      const double tau = ms[0]->qk_clip_tau;
      out[i].idle_guards.push_back(
          std::isnan(mx)
              ? fmt::format("QK-Clip never triggered (tau {:.3g}; no logit recorded)", tau)
              : fmt::format("QK-Clip never triggered: max logit {:.3g} < tau {:.3g}", mx, tau));
    }
    out[i].final_loss = seed_stats(fin);
    out[i].train_loss = seed_stats(train);
    out[i].max_attn_logit = seed_stats(logit);
  }
  return out;
}

std::vector<std::string> variant_notes(const std::vector<VariantSeeds>& vs) {
  std::vector<std::pair<std::string, SeedStats>> cells;
  for (const auto& v : vs) cells.emplace_back(v.label, v.final_loss);
  return seed_spread_notes(cells, "final val loss");
}

std::string variant_table(const std::vector<VariantSeeds>& vs) {
  if (vs.empty()) return {};
  std::string t =
      "| variant | seeds | final val loss | train loss (last 20 steps) | max attention logit | "
      "diverged |\n|---|---|---|---|---|---|\n";
  for (const auto& v : vs)
    t += fmt::format("| {} | {} | {} | {} | {} | {}/{} |\n", v.label, v.seeds,
                     format_spread(v.final_loss), format_spread(v.train_loss),
                     format_spread(v.max_attn_logit, 2), v.diverged, v.seeds);
  t += "\nPer variant (its grid point, every seed): mean ± sample standard deviation (min–max) "
       "over the seeds with a value; a diverged run has no final loss. Max attention logit: the "
       "largest |attention score| of the run's last diagnostics (diag.interval > 0), \"-\" "
       "without them.\n";
  const auto notes = variant_notes(vs);
  for (const auto& n : notes) t += "\n" + n + ".";
  if (!notes.empty()) t += "\n";
  for (const auto& v : vs)
    for (const auto& g : v.idle_guards) t += fmt::format("\n{}: {}.", v.label, g);
  return t;
}

nlohmann::json variants_json(const std::vector<VariantSeeds>& vs) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& v : vs)
    a.push_back({{"label", v.label}, {"variant", v.variant}, {"seeds", v.seeds},
                 {"diverged", v.diverged}, {"final_loss", seed_stats_json(v.final_loss)},
                 {"train_loss", seed_stats_json(v.train_loss)},
                 {"max_attn_logit", seed_stats_json(v.max_attn_logit)},
                 {"idle_guards", v.idle_guards}});
  return a;
}

}  // namespace normlab
