#include "lab/coordcheck.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "model/transformer.h"
#include "normlab/communicator.h"
#include "normlab/config_file.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"
#include "tensor/threading.h"
#include "train/optimizer.h"
#include "train/run_tokenizer.h"
#include "train/step.h"

namespace normlab {

namespace {

int scale_to(long n, int w, int base_w, std::string_view what) {
  if ((n * w) % base_w != 0)
    throw ConfigError({fmt::format("coordinate check at width {}: {} = {} does not scale to a whole "
                                   "number (x {}/{})", w, what, n, w, base_w)});
  return static_cast<int>(n * w / base_w);
}

// The activation sizes of the last forward pass, in coordcheck_activations() order.
std::vector<double> activation_rms(const ForwardStats& st, int L) {
  double attn = 0, mlp = 0, logit = 0, gate = 0;
  for (int l = 0; l < L; ++l) {
    attn += st.branch_rms[2 * l] * st.branch_rms[2 * l];
    mlp += st.branch_rms[2 * l + 1] * st.branch_rms[2 * l + 1];
    logit += st.attn_max_logit[l];
  }
  std::vector<double> out = {st.resid_rms[0], std::sqrt(attn / L), std::sqrt(mlp / L),
                             st.resid_rms[2 * L], st.logits_rms, logit / L};
  if (!st.gate_logit_rms.empty()) {
    for (double g : st.gate_logit_rms) gate += g * g;
    out.push_back(std::sqrt(gate / L));
  }
  return out;
}

}  // namespace

std::vector<std::string> coordcheck_activations(const ModelConfig& m) {
  std::vector<std::string> names = coordcheck_activations();
  if (m.attn_gate != AttnGate::none) names.emplace_back("attn_gate_logit");
  return names;
}

Config coordcheck_config(const Config& base, int width) {
  Config c = base;
  ModelConfig& m = c.model;
  const ModelConfig& b = base.model;
  const int C = b.d_model;
  m.d_model = width;
  m.d_ff = scale_to(b.d_ff, width, C, "model.d_ff");
  if (b.head_dim > 0) {
    m.n_head = scale_to(b.n_head, width, C, "model.n_head (heads of model.head_dim)");
    if (b.n_kv_head > 0) m.n_kv_head = scale_to(b.n_kv_head, width, C, "model.n_kv_head");
  } else if (width % b.n_head != 0) {
    throw ConfigError({fmt::format("coordinate check at width {}: not divisible by model.n_head = "
                                   "{} (or set model.head_dim to keep heads of one size)",
                                   width, b.n_head)});
  }
  return c;
}

double CoordcheckResult::slope(Parametrization p, std::size_t a, int t) const {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (const CoordcheckCurve& c : curves) {
    if (c.parametrization != p) continue;
    const double y = c.rms[a][t];
    if (!(std::isfinite(y) && y > 0)) return std::numeric_limits<double>::quiet_NaN();
    const double x = std::log2(static_cast<double>(c.width)), ly = std::log2(y);
    sx += x, sy += ly, sxx += x * x, sxy += x * ly, ++n;
  }
  const double den = n * sxx - sx * sx;
  if (n < 2 || den <= 0) return std::numeric_limits<double>::quiet_NaN();
  return (n * sxy - sx * sy) / den;
}

CoordcheckResult run_coordcheck(const Config& base, const CoordcheckSettings& settings,
                                const std::function<void(const CoordcheckCurve&)>& on_curve) {
  CoordcheckSettings s = settings;
  std::sort(s.widths.begin(), s.widths.end());
  s.widths.erase(std::unique(s.widths.begin(), s.widths.end()), s.widths.end());
  if (s.widths.size() < 2) throw InputError("the coordinate check needs at least two widths");
  if (s.steps < 1 || s.seeds < 1) throw InputError("the coordinate check needs steps >= 1 and seeds >= 1");
  std::vector<Config> cfgs;  // every config checked before anything runs
  for (Parametrization p : s.parametrizations)
    for (int w : s.widths) {
      Config c = coordcheck_config(base, w);
      c.model.parametrization = p;
      if (p == Parametrization::mup && c.model.mup_base_width == 0)
        c.model.mup_base_width = s.widths.front();
      validate(c);
      cfgs.push_back(std::move(c));
    }
  set_thread_count(base.train.threads);
  const RunTokenizer tok = resolve_tokenizer(base, std::string());
  check_vocab(base.model, tok);
  const TokenCorpus corpus = TokenCorpus::from_path(base.data.path, *tok.tok);
  const CorpusSplit split = corpus.split(base.data.val_fraction, base.model.seq_len);
  const auto single = make_single_process_communicator();
  CoordcheckResult out;
  out.settings = s;
  out.activations = coordcheck_activations(base.model);
  const std::size_t n_act = out.activations.size();
  for (const Config& cfg : cfgs) {
    CoordcheckCurve curve{cfg.model.parametrization, cfg.model.d_model,
                          std::vector<std::vector<double>>(n_act, std::vector<double>(s.steps + 1, 0.0)),
                          std::vector<double>(s.steps + 1, 0.0)};
    const int B = cfg.train.batch_size, T = cfg.model.seq_len, L = cfg.model.n_layer;
    for (int k = 0; k < s.seeds; ++k) {
      Transformer<float> model(cfg.model, B, T);
      model.init_params(cfg.train.seed + static_cast<std::uint64_t>(k));
      BatchSampler sampler(split.train, B, T, sampler_seed(cfg.train));  // the same batches
      const NextBatch next_batch = [&](int* idx, int* tgt) { sampler.next(idx, tgt); };
      const auto opt = make_optimizer<float>(model.table(), cfg.optim, cfg.model);
      TrainStep step(model, *single,
                     {.batch = B, .seq = T, .accum = 1, .z_loss = cfg.train.z_loss,
                      .grad_clip = cfg.optim.grad_clip, .attn_maxima = opt->needs_attention_maxima()});
      for (int t = 0; t <= s.steps; ++t) {
        const StepResult sr = step.run(next_batch, /*collect_stats=*/true);
        const std::vector<double> a = activation_rms(model.stats(), L);
        NL_CHECK(a.size() == n_act, "coordcheck: {} activations measured, {} named", a.size(),
                 n_act);
        for (std::size_t i = 0; i < n_act; ++i) curve.rms[i][t] += a[i] / s.seeds;
        curve.loss[t] += sr.loss.loss / s.seeds;
        if (t < s.steps)
          opt->update(model.params(), model.grads(), cfg.optim.lr, sr.clip_scale,
                      {sr.attn_max_logit_head});
      }
    }
    if (on_curve) on_curve(curve);
    out.curves.push_back(std::move(curve));
  }
  return out;
}

nlohmann::json coordcheck_json(const Config& base, const CoordcheckResult& r) {
  nlohmann::json j;
  std::vector<std::string> ps;
  for (Parametrization p : r.settings.parametrizations) ps.emplace_back(to_string(p));
  j["settings"] = {{"widths", r.settings.widths}, {"parametrizations", ps},
                   {"steps", r.settings.steps}, {"seeds", r.settings.seeds},
                   {"base_config", config_to_json(base)}};
  j["activations"] = r.activations;
  j["curves"] = nlohmann::json::array();
  for (const CoordcheckCurve& c : r.curves) {
    nlohmann::json rms;
    for (std::size_t a = 0; a < c.rms.size(); ++a) rms[r.activations[a]] = c.rms[a];
    j["curves"].push_back({{"parametrization", to_string(c.parametrization)}, {"width", c.width},
                           {"rms", rms}, {"loss", c.loss}});
  }
  nlohmann::json slopes;
  for (Parametrization p : r.settings.parametrizations)
    for (std::size_t a = 0; a < r.activations.size(); ++a) {
      std::vector<double> per_step;
      for (int t = 0; t <= r.settings.steps; ++t) per_step.push_back(r.slope(p, a, t));
      slopes[std::string(to_string(p))][r.activations[a]] = per_step;
    }
  j["slopes"] = slopes;
  j["verdicts"] = coordcheck_verdicts(r);
  j["growth_slope"] = kCoordcheckGrowthSlope;
  return j;
}

CoordcheckResult coordcheck_from_json(const nlohmann::json& j) {
  CoordcheckResult r;
  const auto parametrization = [](const std::string& name) {
    const auto p = enum_from_string<Parametrization>(name);
    if (!p) throw FormatError("coordcheck.json: unknown parametrization '" + name + "'");
    return *p;
  };
  try {
    const auto& st = j.at("settings");
    r.settings.widths = st.at("widths").get<std::vector<int>>();
    for (const auto& p : st.at("parametrizations")) r.settings.parametrizations.push_back(parametrization(p));
    r.settings.steps = st.at("steps").get<int>();
    r.settings.seeds = st.at("seeds").get<int>();
    // Files written before the activations were listed per model hold the six fixed ones.
    r.activations = j.contains("activations") ? j.at("activations").get<std::vector<std::string>>()
                                              : coordcheck_activations();
    for (const auto& c : j.at("curves")) {
      CoordcheckCurve cv{parametrization(c.at("parametrization")), c.at("width").get<int>(), {}, {}};
      for (const std::string& a : r.activations) {
        std::vector<double> v;
        for (const auto& x : c.at("rms").at(a))
          v.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
        if (static_cast<int>(v.size()) != r.settings.steps + 1)
          throw FormatError("coordcheck.json: " + a + " has the wrong number of steps");
        cv.rms.push_back(std::move(v));
      }
      for (const auto& x : c.at("loss"))
        cv.loss.push_back(x.is_null() ? std::numeric_limits<double>::quiet_NaN() : x.get<double>());
      r.curves.push_back(std::move(cv));
    }
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(std::string("coordcheck.json: ") + e.what());
  }
  return r;
}

std::string coordcheck_table(const CoordcheckResult& r) {
  const int last = r.settings.steps;
  std::string out = "| parametrization | activation |";
  std::string rule = "|---|---|";
  for (int w : r.settings.widths) out += fmt::format(" d={} |", w), rule += "---|";
  out += " slope at step 1 | slope at step " + std::to_string(last) + " |\n";
  out += rule + "---|---|\n";
  for (Parametrization p : r.settings.parametrizations)
    for (std::size_t a = 0; a < r.activations.size(); ++a) {
      out += fmt::format("| {} | {} |", to_string(p), r.activations[a]);
      for (int w : r.settings.widths)
        for (const CoordcheckCurve& c : r.curves)
          if (c.parametrization == p && c.width == w) out += fmt::format(" {:.4g} |", c.rms[a][last]);
      out += fmt::format(" {:+.2f} | {:+.2f} |\n", r.slope(p, a, 1), r.slope(p, a, last));
    }
  return out;
}

std::vector<std::string> coordcheck_verdicts(const CoordcheckResult& r) {
  const int last = r.settings.steps;
  std::vector<std::string> out;
  for (Parametrization p : r.settings.parametrizations) {
    std::vector<std::string> grow, unknown;
    for (std::size_t a = 0; a < r.activations.size(); ++a) {
      const double k = r.slope(p, a, last);
      if (!std::isfinite(k)) unknown.push_back(r.activations[a]);
      else if (k > kCoordcheckGrowthSlope)
        grow.push_back(fmt::format("{} ({:+.2f})", r.activations[a], k));
    }
    std::string v = fmt::format("{}: ", to_string(p));
    if (grow.empty()) {
      v += fmt::format("no activation grows with width (every slope at step {} <= {:.2f})", last,
                       kCoordcheckGrowthSlope);
    } else {
      v += fmt::format("{} of {} grow with width beyond slope {:.2f} at step {}: ", grow.size(),
                       r.activations.size(), kCoordcheckGrowthSlope, last);
      for (std::size_t i = 0; i < grow.size(); ++i) v += (i ? ", " : "") + grow[i];
    }
    if (!unknown.empty()) {
      v += "; not checked (no finite size at some width): ";
      for (std::size_t i = 0; i < unknown.size(); ++i) v += (i ? ", " : "") + unknown[i];
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace normlab
