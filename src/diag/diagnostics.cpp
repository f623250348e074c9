#include "diag/diagnostics.h"

#include <fmt/format.h>

#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "ops/sigma_reparam.h"

#include <cmath>
#include <string_view>

namespace normlab {

namespace {
double sq(std::span<const float> a, const ParamSpec& s) {
  double x = 0;
  for (long i = 0; i < s.numel; ++i) x += static_cast<double>(a[s.offset + i]) * a[s.offset + i];
  return x;
}
nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
nlohmann::json vec_json(const std::vector<double>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (double x : v) j.push_back(finite_or_null(x));
  return j;
}
}  // namespace

GradNorms grad_norms(const ParamTable& table, int n_layer, std::span<const float> arena) {
  GradNorms g;
  g.block.assign(n_layer, 0.0);
  g.attn.assign(n_layer, 0.0);
  g.mlp.assign(n_layer, 0.0);
  double emb = 0, head = 0, fin = 0;
  for (const ParamSpec& s : table.specs()) {
    if (!s.trained) continue;  // buffers (σReparam's u, v) have no gradient
    const double x = sq(arena, s);
    g.group[std::string(to_string(s.group))] += x;
    if (s.layer >= 0) {
      g.block[s.layer] += x;
      (s.sublayer == 0 ? g.attn : g.mlp)[s.layer] += x;
    } else if (s.role == ParamRole::tok_emb || s.role == ParamRole::pos_emb) {
      emb += x;
    } else if (s.role == ParamRole::norm_gain || s.role == ParamRole::norm_bias ||
               s.role == ParamRole::dyt_alpha || s.role == ParamRole::norm_shift) {
      fin += x;  // the final norm's: the only norm site outside the blocks
    } else {
      head += x;  // the LM head, and nGPT's logit scale s_z
    }
  }
  for (auto* v : {&g.block, &g.attn, &g.mlp})
    for (double& x : *v) x = std::sqrt(x);
  for (auto& [k, v] : g.group) v = std::sqrt(v);
  g.embedding = std::sqrt(emb);
  g.head = std::sqrt(head);
  g.final_norm = std::sqrt(fin);
  return g;
}

nlohmann::json diagnostics_json(const Transformer<float>& model, std::span<const float> grads,
                                std::span<const float> before, bool per_head) {
  const int L = model.config().n_layer, H = model.config().n_head;
  nlohmann::json j;
  const GradNorms g = grad_norms(model.table(), L, grads);
  j[metric::grad_norm_block] = vec_json(g.block);
  j[metric::grad_norm_attn] = vec_json(g.attn);
  j[metric::grad_norm_mlp] = vec_json(g.mlp);
  for (const auto& [k, v] : g.group) j[metric::grad_norm_group][k] = finite_or_null(v);
  const ForwardStats& st = model.stats();
  j[metric::resid_rms] = vec_json(st.resid_rms);
  j[metric::resid_max] = vec_json(st.resid_max);
  j[metric::attn_max_logit] = vec_json(st.attn_max_logit);
  j[metric::attn_entropy] = vec_json(st.attn_entropy);
  j[metric::attn_first_mass] = vec_json(st.attn_first_mass);
  if (!st.attn_sink_mass.empty())  // a sink in the softmax (model.attn_sink)
    j[metric::attn_sink_mass] = vec_json(st.attn_sink_mass);
  if (per_head) {
    nlohmann::json heads = nlohmann::json::array();
    for (int l = 0; l < L; ++l) {
      std::vector<double> row(st.attn_max_logit_head.begin() + static_cast<long>(l) * H,
                              st.attn_max_logit_head.begin() + static_cast<long>(l + 1) * H);
      heads.push_back(vec_json(row));
    }
    j[metric::attn_max_logit_head] = heads;
  }
  j[metric::log_z_mean] = finite_or_null(st.log_z_mean);
  j[metric::log_z_std] = finite_or_null(st.log_z_std);
  j[metric::log_z_max] = finite_or_null(st.log_z_max);
  j[metric::max_logit] = finite_or_null(st.max_logit);
  j[metric::max_logit_raw] = finite_or_null(st.max_logit_raw);
  // Selected by role (ParamSpec::role), keyed by site (ParamSpec::site). DyT / Derf sites (role
  // dyt_alpha): alpha now, and the saturated fraction of the inputs of the forward pass that
  // collected the statistics. nGPT's eigen learning rates (role ngpt_alpha, `blocks.l.attn.alpha`
  // / `.mlp.alpha`): the mean over channels of the effective alpha = mult * stored
  // (model/plan.h's StoredScale), under their own key.
  const ParamTable& table = model.table();
  const auto& specs = table.specs();
  const float* P = model.params().data();
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& s = specs[i];
    if (s.role == ParamRole::dyt_alpha) {
      j[metric::dyt_alpha][s.site] = finite_or_null(P[s.offset]);
      if (i < st.norm_saturated.size())
        j[metric::dyt_saturated][s.site] = finite_or_null(st.norm_saturated[i]);
    } else if (s.role == ParamRole::ngpt_alpha) {
      NL_CHECK(s.layer >= 0 && s.sublayer >= 0, "eigen learning rate {} outside a block", s.name);
      const BlockPlan& bp = model.plan().blocks[s.layer];
      const double mult = (s.sublayer == 0 ? bp.attn : bp.mlp).branch_scale_mult;
      double sum = 0;
      for (long k = 0; k < s.numel; ++k) sum += P[s.offset + k];
      const std::string site =
          fmt::format("blocks.{}.{}", s.layer, s.sublayer == 0 ? "attn" : "mlp");
      j[metric::ngpt_alpha][site] = finite_or_null(mult * sum / static_cast<double>(s.numel));
    }
  }
  // σReparam weights (role sigma_u; the weight, v and gamma at its site): sigma(W) = u^T W v and
  // gamma per row block.
  for (const ParamSpec& s : specs) {
    if (s.role != ParamRole::sigma_u) continue;
    const ParamSpec* w = nullptr;
    for (const ParamSpec& c : specs)
      if (c.site == s.site && is_block_weight(c.role)) w = &c;
    const ParamSpec* v = table.find(s.site, ParamRole::sigma_v);
    const ParamSpec* gamma = table.find(s.site, ParamRole::sigma_gamma);
    NL_CHECK(w && v && gamma, "σReparam state at {} without its weight, v or gamma", s.site);
    const int I = static_cast<int>(w->shape[1]);
    std::vector<std::int64_t> rows = w->row_blocks;
    if (rows.empty()) rows.push_back(w->shape[0]);
    nlohmann::json sig = nlohmann::json::array(), gam = nlohmann::json::array();
    long row0 = 0;
    for (std::size_t b = 0; b < rows.size(); ++b) {
      sig.push_back(finite_or_null(ops::sigma_estimate(P + s.offset + row0, P + v->offset + b * I,
                                                       P + w->offset + row0 * I,
                                                       static_cast<int>(rows[b]), I)));
      gam.push_back(finite_or_null(P[gamma->offset + b]));
      row0 += rows[b];
    }
    j[metric::sigma_w][s.site] = sig;
    j[metric::sigma_gamma][s.site] = gam;
  }
  if (!before.empty()) {
    std::map<std::string, std::pair<double, double>> acc;  // group -> (|dw|^2, |w|^2)
    const auto after = model.params();
    for (const ParamSpec& s : model.table().specs()) {
      if (!s.trained) continue;  // buffers move by their own rule (σReparam's power iteration)
      double d = 0, w = 0;
      for (long i = 0; i < s.numel; ++i) {
        const double b = before[s.offset + i], a = after[s.offset + i];
        d += (a - b) * (a - b);
        w += b * b;
      }
      auto& e = acc[std::string(to_string(s.group))];
      e.first += d;
      e.second += w;
    }
    std::map<std::string, long> count;
    for (const ParamSpec& s : model.table().specs())
      if (s.trained) count[std::string(to_string(s.group))] += s.numel;
    for (const auto& [k, e] : acc) {
      j[metric::update_ratio][k] = finite_or_null(e.second > 0 ? std::sqrt(e.first / e.second) : 0.0);
      j[metric::update_rms][k] = finite_or_null(std::sqrt(e.first / static_cast<double>(count[k])));
    }
  }
  return j;
}

nlohmann::json second_moment_json(const ParamTable& table, std::span<const double> r) {
  nlohmann::json j = nlohmann::json::object();
  std::map<std::string, std::pair<double, long>> acc;  // group -> (sum of n r^2, n)
  double worst = -1;
  std::string worst_name;
  for (std::size_t i = 0; i < table.specs().size() && i < r.size(); ++i) {
    if (std::isnan(r[i])) continue;
    const ParamSpec& s = table.specs()[i];
    auto& e = acc[std::string(to_string(s.group))];
    e.first += r[i] * r[i] * static_cast<double>(s.numel);
    e.second += s.numel;
    if (r[i] > worst) worst = r[i], worst_name = s.name;
  }
  if (acc.empty()) return j;
  for (const auto& [k, e] : acc)
    j[metric::rms_g2v][k] = finite_or_null(std::sqrt(e.first / static_cast<double>(e.second)));
  j[metric::rms_g2v_max] = finite_or_null(worst);
  j[metric::rms_g2v_max_tensor] = worst_name;
  return j;
}

}  // namespace normlab
