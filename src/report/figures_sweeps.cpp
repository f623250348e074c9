// Sweep grouping for the report's figures: a sweep's runs as one line per variant over the learning
// rate, and the variants of sweeps of different model sizes with their non-embedding parameter
// counts and best learning rates.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "model/summary.h"
#include "normlab/config.h"
#include "report/figures.h"
#include "report/figures_detail.h"
#include "report/inputs.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report::figures_detail {

bool variant_matches(const json& variant, const json& overrides) {
  if (!variant.is_object()) return true;
  for (const auto& [k, val] : variant.items())
    if (!overrides.is_object() || !overrides.contains(k) || !same_value(overrides[k], val)) return false;
  return true;
}

std::vector<LrGroup> sweep_lr_groups(const SweepInput& sw) {
  std::vector<LrGroup> groups;
  const auto matches = variant_matches;
  const auto lr_of = [&](const SweepRun& r) {
    return r.overrides.contains(sw.lr_key) ? as_double(r.overrides[sw.lr_key]) : kNaN;
  };
  std::vector<json> variants;
  if (!sw.sensitivity.empty()) {
    for (const auto& row : sw.sensitivity) {
      LrGroup g;
      g.label = row.label;
      g.sensitivity = row.sensitivity;
      g.best_loss = row.best_loss;
      for (std::size_t i = 0; i < row.lrs.size(); ++i) g.points.emplace_back(row.lrs[i], row.final_losses[i]);
      for (std::size_t i = 0; i < row.final_loss_min.size(); ++i)
        g.band[row.lrs[i]] = {row.final_loss_min[i], row.final_loss_max[i]};
      groups.push_back(std::move(g));
      variants.push_back(row.variant);
    }
  } else {
    // No sensitivity table: group the runs by everything but the learning rate.
    for (const auto& r : sw.runs) {
      json variant = r.overrides.is_object() ? r.overrides : json::object();
      variant.erase(sw.lr_key);
      const auto it = std::find(variants.begin(), variants.end(), variant);
      if (it == variants.end()) {
        variants.push_back(variant);
        groups.emplace_back();
      }
    }
    for (const auto& r : sw.runs) {
      json variant = r.overrides.is_object() ? r.overrides : json::object();
      variant.erase(sw.lr_key);
      const std::size_t gi = std::find(variants.begin(), variants.end(), variant) - variants.begin();
      groups[gi].points.emplace_back(lr_of(r), failed_status(r.status) ? kNaN : r.final_loss);
    }
  }
  // Labelled by what differs among the variants: "post", "post, qk_norm rmsnorm".
  std::vector<std::map<std::string, json>> cfgs;
  std::set<std::string> key_set;
  for (const auto& v : variants) {
    cfgs.emplace_back();
    if (!v.is_object()) continue;
    for (const auto& [k, val] : v.items()) {
      cfgs.back()[k] = val;
      key_set.insert(k);
    }
  }
  const std::vector<std::string> labels =
      distinguishing_labels(cfgs, std::vector<std::string>(key_set.begin(), key_set.end()), sw.lr_key);
  for (std::size_t gi = 0; gi < groups.size(); ++gi)
    groups[gi].label = !labels[gi].empty() ? labels[gi] : !groups[gi].label.empty() ? groups[gi].label : sw.name;
  for (const auto& r : sw.runs) {
    if (!failed_status(r.status)) continue;
    for (std::size_t gi = 0; gi < groups.size(); ++gi)
      if (matches(variants[gi], r.overrides))
        groups[gi].failures.emplace_back(lr_of(r), r.message.empty() ? r.status : r.status + ": " + r.message);
  }
  return groups;
}

// ---- sweeps of different model sizes (Wortsman et al. 2023, figure 1) ----

namespace {

// Keys that set the model's size: variants of sweeps that differ only in these (and in the
// learning rate) are one line against the parameter count.
bool size_key(const std::string& key) {
  static const std::set<std::string> keys{"model.d_model", "model.n_head", "model.n_kv_head",
                                          "model.head_dim", "model.d_ff", "model.n_layer"};
  return keys.count(key) > 0;
}

double non_embedding_params(const Config& c) {
  const ModelSummary m = summarize(c.model, 1);
  const auto it = m.params_by_group.find("embedding");
  return double(m.params - (it == m.params_by_group.end() ? 0 : it->second));
}

}  // namespace

bool several_sizes(const std::vector<SizedVariant>& svs) {
  std::map<std::string, std::set<double>> sizes;
  for (const auto& sv : svs) sizes[sv.label].insert(sv.params);
  for (const auto& [label, s] : sizes)
    if (s.size() >= 2) return true;
  return false;
}

std::vector<SizedVariant> sized_variants(const ReportInputs& in, const Context& cx) {
  std::vector<SizedVariant> out;
  for (const auto& sw : in.sweeps)
    for (const auto& row : sw.sensitivity) {
      SizedVariant sv;
      sv.sweep = &sw;
      sv.row = &row;
      for (const auto& r : sw.runs) {
        if (!variant_matches(row.variant, r.overrides)) continue;
        const auto v = std::find_if(cx.runs.begin(), cx.runs.end(), [&](const RunView& rv) {
          return fs::path(rv.run->dir).lexically_normal() == fs::path(r.dir).lexically_normal();
        });
        if (v == cx.runs.end() || !v->run->config) continue;
        sv.params = non_embedding_params(*v->run->config);
        for (const auto& [k, val] : v->cfg)
          if (k != sw.lr_key && !size_key(k)) sv.cfg[k] = val;
        break;
      }
      if (!std::isfinite(sv.params)) continue;
      double best = kNaN;
      for (std::size_t i = 0; i < row.lrs.size() && i < row.final_losses.size(); ++i)
        if (std::isfinite(row.final_losses[i]) && !(row.final_losses[i] >= best)) {
          best = row.final_losses[i];
          sv.best_lr = row.lrs[i];
        }
      out.push_back(std::move(sv));
    }
  std::vector<std::map<std::string, json>> cfgs;
  for (const auto& sv : out) cfgs.push_back(sv.cfg);
  const std::vector<std::string> labels = distinguishing_labels(cfgs, cx.keys);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i].label = labels[i].empty() ? out[i].row->label : labels[i];
  return out;
}

}  // namespace normlab::report::figures_detail
