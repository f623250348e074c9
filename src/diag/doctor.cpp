// `normlab doctor`'s analysis: from a run's metrics.jsonl and config.toml to a Diagnosis. Each
// check is one function over the step records; docs/doctor.md describes them and their thresholds.
#include "diag/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "io/metrics.h"
#include "normlab/config_file.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "train/run_tokenizer.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {

using json = nlohmann::json;
using T = DoctorThresholds;

double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}
// A per-layer array field as doubles (NaN for null).
std::vector<double> vec(const json& j, const char* key) {
  std::vector<double> out;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& x : *it) out.push_back(x.is_number() ? x.get<double>() : NAN);
  return out;
}
// Short numbers for messages: 3 significant digits, no exponent below 1e5.
std::string g(double v) {
  if (!std::isfinite(v)) return "non-finite";
  if (std::fabs(v) >= 1e5 || (v != 0 && std::fabs(v) < 1e-3)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.3g}", v);
}
std::string factor(double a, double b) {
  if (!(std::isfinite(a) && std::isfinite(b)) || b <= 0) return "";
  return fmt::format(" ({}x the step-1 value {})", g(a / b), g(b));
}
double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
// Name of residual boundary k (docs/metrics.md: 0 embedding, 2l+1 after block l's attention,
// 2l+2 after block l).
std::string boundary(std::size_t k) {
  if (k == 0) return "the embedding";
  const std::size_t l = (k - 1) / 2;
  return k % 2 ? fmt::format("after block {}'s attention", l) : fmt::format("after block {}", l);
}

struct Run {
  const Config& cfg;
  bool has_config;
  std::vector<const json*> steps;  // step lines, in order
  std::vector<const json*> diag;   // those with diagnostics fields
  std::vector<const json*> rollbacks;
};

std::string lr_text(const Config& c) { return g(c.optim.lr); }

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
    f.evidence.push_back("which head: unknown (diag.per_head = false)");
  const Config& c = r.cfg;
  if (c.model.qk_norm == QKNormKind::none)
    f.remedies.push_back(
        "QK-Norm: --set model.qk_norm=rmsnorm (normalizes queries and keys per head, so the logits "
        "cannot grow with the weights; Dehghani et al. 2023, Wortsman et al. 2023). normlab's "
        "finding 4 (\"Pre-Norm with and without QK-Norm\"): the largest logit at lr 0.3 fell from "
        "34,570 to 135 and the learning-rate sensitivity halved");
  else
    f.remedies.push_back(
        fmt::format("QK-Norm is already on (model.qk_norm = {}): lower the "
                    "learning rate (optim.lr = {} now)",
                    to_string(c.model.qk_norm), lr_text(c)));
  if (c.model.attn_softcap <= 0)
    f.remedies.push_back(
        "or an attention soft-cap: --set model.attn_softcap=50 (Gemma 2's "
        "value; bounds the logits, at a small cost when it binds: finding 6)");
  f.confirm.push_back(fmt::format(
      "rerun with the remedy and --set diag.interval=N --set diag.per_head=true: attn_max_logit "
      "should stay below {} and attn_entropy above {} in every layer",
      g(T::kAttnLogit), g(T::kAttnEntropyCollapse)));
  f.confirm.push_back(fmt::format(
      "normlab sweep --grid model.qk_norm=none,rmsnorm --grid optim.lr=... around lr {} compares "
      "the two by their final loss",
      lr_text(c)));
  f.values = {{"max_attn_logit", peak},
              {"step", peak_step},
              {"layer", peak_layer},
              {"head", head >= 0 ? json(head) : json(nullptr)},
              {"step1_max_attn_logit", std::isfinite(base) ? json(base) : json(nullptr)},
              {"min_attn_entropy", std::isfinite(ent_min) ? json(ent_min) : json(nullptr)},
              {"min_attn_entropy_layer", ent_layer},
              {"min_attn_entropy_step", ent_step}};
  out.push_back(std::move(f));
}

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
  if (c.train.z_loss <= 0)
    f.remedies.push_back(
        "z-loss: --set train.z_loss=1e-4 (penalizes log^2 Z so the logits keep "
        "their offset; PaLM, Wortsman et al. 2023; normlab's finding 5 (\"z-loss "
        "0 vs 1e-4\"): it stopped log Z's drift)");
  else
    f.remedies.push_back(
        fmt::format("z-loss is on (train.z_loss = {}): raise it or lower the "
                    "learning rate (optim.lr = {})",
                    g(c.train.z_loss), lr_text(c)));
  if (c.model.final_softcap <= 0)
    f.remedies.push_back(
        "or a final soft-cap: --set model.final_softcap=30 (Gemma 2; bounds the "
        "output logits)");
  if (c.optim.weight_decay <= 0)
    f.remedies.push_back(
        "weight decay is off (optim.weight_decay = 0): Wortsman et al. 2023 find "
        "output-logit divergence when it is; --set optim.weight_decay=0.1");
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
  out.push_back(std::move(f));
}

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
    f.remedies.push_back(fmt::format("lower the learning rate: --set optim.lr={} (now {})",
                                     g(c.optim.lr / 3), lr_text(c)));
    if (c.optim.warmup_steps < std::max(1, c.train.steps / 20))
      f.remedies.push_back(fmt::format(
          "longer warmup: --set optim.warmup_steps={} (now {}; about 5-10% of train.steps)",
          std::max(10, c.train.steps / 10), c.optim.warmup_steps));
    if (c.model.placement == Placement::post || c.model.placement == Placement::deepnorm)
      f.remedies.push_back(fmt::format(
          "{}-Norm without warmup is the classic unstable case (Xiong et al. 2020): switch to "
          "Pre-Norm or Peri-Norm (--set model.placement=pre or peri), which normalize before the "
          "sublayer and keep gradients well-scaled at the start",
          c.model.placement == Placement::post ? "Post" : "DeepNorm's Post"));
    if (c.train.spike_policy == SpikePolicy::off)
      f.remedies.push_back(
          "meanwhile, let the guards contain them: --set train.spike_policy=skip "
          "(or rollback)");
    f.confirm.push_back(fmt::format(
        "rerun with --set train.log_interval=1 --set diag.interval=1 over steps {}-{}: with the "
        "remedy no loss should rise {} nats above the running minimum",
        f.first_step, f.last_step, g(T::kSpikeNats)));
    json list_j = json::array();
    for (const auto& sp : spikes)
      list_j.push_back({{"step", sp.step},
                        {"loss", sp.loss},
                        {"lowest_before", sp.before},
                        {"grad_norm", std::isfinite(sp.grad) ? json(sp.grad) : json(nullptr)}});
    f.values = {{"spikes", list_j}, {"gradient_spikes_with", n_with}};
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
    f.remedies.push_back(
        "none needed while the loss does not spike; repeated ones at one layer "
        "are an early sign of the instabilities above");
    f.confirm.push_back(
        "diag.interval = 1 around those steps shows which blocks' gradient norms "
        "(grad_norm_block) jump");
    json l = json::array();
    for (const auto& [s, fac] : grad_only) l.push_back({{"step", s}, {"factor", fac}});
    f.values = {{"spikes", l}};
    out.push_back(std::move(f));
  }
}

// ---- residual-stream growth ----------------------------------------------------------------
void check_residual(const Run& r, std::vector<DoctorFinding>& out) {
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
  if (c.model.placement != Placement::peri)
    f.remedies.push_back(fmt::format(
        "Peri-Norm: --set model.placement=peri (now {}): a norm on each sublayer's output before "
        "the add bounds what every block adds to the stream (Kim et al. 2025, \"Peri-LN\"), where "
        "Pre-Norm lets it grow with depth and learning rate",
        to_string(c.model.placement)));
  f.remedies.push_back(fmt::format("lower the learning rate (optim.lr = {} now)", lr_text(c)));
  f.confirm.push_back(
      fmt::format("rerun with the remedy and diagnostics on: resid_rms should stay "
                  "below {} at every boundary; resid_max / resid_rms shows whether "
                  "a few massive activations carry it",
                  g(T::kResidRms)));
  f.values = {{"max_resid_rms", peak}, {"step", peak_step}, {"boundary", peak_k}, {"resid_rms", v}};
  out.push_back(std::move(f));
}

// ---- unigram plateau -----------------------------------------------------------------------
void check_plateau(const Run& r, std::optional<double> init, std::optional<double> fin,
                   std::optional<double> H, std::vector<DoctorFinding>& out) {
  if (!H || !fin || !init || !std::isfinite(*fin)) return;
  if (*init - *fin < T::kPlateauDrop) return;  // never got down there: not a plateau
  if (*fin < *H - T::kPlateauBelow || *fin > *H + T::kPlateauAbove) return;
  const Config& c = r.cfg;
  DoctorFinding f;
  f.kind = "unigram_plateau";
  f.severity = "problem";
  f.first_step = r.steps.empty() ? 0 : r.steps.front()->value(metric::step, 0L);
  f.last_step = r.steps.empty() ? 0 : r.steps.back()->value(metric::step, 0L);
  // Where it got onto the plateau: the first logged step within the band.
  for (const json* j : r.steps) {
    const double l = num(*j, metric::loss);
    if (std::isfinite(l) && l <= *H + T::kPlateauAbove) {
      f.first_step = j->value(metric::step, 0L);
      break;
    }
  }
  f.title = fmt::format(
      "stalled at the unigram plateau: final train loss {} vs unigram entropy "
      "{} of the training tokens",
      g(*fin), g(*H));
  f.evidence.push_back(fmt::format(
      "train loss (last 20 steps) {} from {} at step 1; the unigram entropy of the training tokens "
      "is {} nats: the model predicts little more than token frequencies (band {} to {})",
      g(*fin), g(*init), g(*H), g(*H - T::kPlateauBelow), g(*H + T::kPlateauAbove)));
  f.evidence.push_back(
      fmt::format("on it from step {} to the last step {}", f.first_step, f.last_step));
  if (!r.diag.empty()) {
    const auto gb = vec(*r.diag.back(), metric::grad_norm_block);
    if (gb.size() > 1 && gb.back() > 0 && std::isfinite(gb.front()))
      f.evidence.push_back(fmt::format(
          "gradient norm of block 0 {} against block {} {} at step {} (ratio {}){}", g(gb.front()),
          gb.size() - 1, g(gb.back()), r.diag.back()->value(metric::step, 0L),
          g(gb.front() / gb.back()),
          gb.front() / gb.back() < 1e-3 ? ": the lower blocks receive almost no gradient" : ""));
  }
  const std::string f2 = "finding 2 (\"Depth without warmup\")",
                    f3 = "finding 3 (\"Learning-rate "
                         "sweep with and without warmup\")";
  switch (c.model.placement) {
    case Placement::post:
    case Placement::deepnorm:
      f.remedies.push_back(fmt::format(
          "change the placement: --set model.placement=pre (or peri). normlab's {}: Post-Norm and "
          "DeepNorm ended on the unigram plateau (val 2.989) at every depth from 6 to 48 layers at "
          "lr 2e-3 without warmup, while Pre-Norm learned (2.24 at 6 layers); {}: Post-Norm stayed "
          "there at all 7 learning rates from 3e-4 to 0.3, with warmup 50 or without",
          f2, f3));
      break;
    case Placement::pre:
      f.remedies.push_back(fmt::format(
          "the learning rate and warmup: normlab's {}: Pre-Norm learned best at lr 3e-3 with "
          "warmup 50 (val 2.158; 2.81 at 3e-4, 2.77 at 0.3); now optim.lr = {}, warmup {}. Its {}: "
          "deep Pre-Norm (48 layers) ended on the plateau too, so fewer layers help",
          f3, lr_text(c), c.optim.warmup_steps, f2));
      f.remedies.push_back(
          "or Peri-Norm (--set model.placement=peri), whose best lr in finding 3 "
          "was high (0.095) and whose sensitivity was the lowest");
      break;
    case Placement::peri:
      f.remedies.push_back(fmt::format(
          "the learning rate: normlab's {}: Peri-Norm's best lr was 0.095 (val 2.36-2.41, with "
          "warmup or not); now optim.lr = {}. Its {}: Peri-Norm ended on the plateau from 12 "
          "layers at lr 2e-3, so fewer layers or Pre-Norm help at depth",
          f3, lr_text(c), f2));
      break;
    default:
      f.remedies.push_back(fmt::format(
          "the placement and learning rate: normlab's {} and {}: Pre-Norm (lr 3e-3, warmup) and "
          "Peri-Norm (lr ~0.1) learned where Post-Norm stayed on the plateau",
          f2, f3));
  }
  f.remedies.push_back("or simply more steps: a run this short may not have left the plateau yet");
  f.confirm.push_back(fmt::format(
      "normlab sweep --grid model.placement=pre,peri --grid optim.lr=3e-4:0.3:7log: a working "
      "setting ends below {} nats",
      g(*H - T::kPlateauBelow)));
  f.values = {{"final_train_loss", *fin}, {"unigram_entropy", *H}, {"initial_loss", *init}};
  out.push_back(std::move(f));
}

// ---- guard events --------------------------------------------------------------------------
void check_guard(const Run& r, const std::string& end_reason, const std::string& end_detail,
                 std::vector<DoctorFinding>& out) {
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
    f.remedies.push_back(
        "non-finite values come from one of the instabilities above when doctor "
        "lists one (fix that first); otherwise lower the learning rate and check "
        "the data around those steps");
    if (r.cfg.train.spike_policy != SpikePolicy::rollback)
      f.remedies.push_back(
          "--set train.spike_policy=rollback goes back to the last checkpoint "
          "instead of only skipping the update");
    f.confirm.push_back(
        "resume from the checkpoint before the first one with --set "
        "train.log_interval=1 --set diag.interval=1 and watch which signal "
        "(attn_max_logit, log_z_mean, resid_rms, grad_norm_block) grows first");
    json l = json::array();
    for (long s : nonfinite) l.push_back(s);
    f.values = {{"nonfinite_steps", l},
                {"skipped_nonfinite", nf_skipped},
                {"skipped_total", total_skipped}};
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
    f.remedies.push_back(r.rollbacks.empty()
                             ? "a few skipped steps in a noisy small-batch run are normal; many, "
                               "or in a row, point to the instabilities above"
                             : "repeated rollbacks mean the run keeps reaching the same bad "
                               "region: lower the learning rate or fix the instability listed");
    f.confirm.push_back("the skipped and spike fields of the step lines show each event");
    f.values = {{"skipped_finite", skipped_finite.size()},
                {"rollbacks", r.rollbacks.size()},
                {"skipped_total", total_skipped}};
    out.push_back(std::move(f));
  }
}

}  // namespace

long Diagnosis::problems() const {
  return std::count_if(findings.begin(), findings.end(),
                       [](const DoctorFinding& f) { return f.severity == "problem"; });
}

std::string Diagnosis::verdict() const {
  std::string s;
  if (end_reason == "diverged") s = "diverged; ";
  if (healthy()) {
    s += "healthy (no instability found";
    const long notes = static_cast<long>(findings.size());
    if (notes) s += fmt::format("; {} note{}", notes, notes == 1 ? "" : "s");
    if (diag_records == 0)
      s += "; diagnostics off, some signals unchecked";
    else if (!unigram_entropy)
      s += "; unigram plateau unchecked";
    return s + ")";
  }
  std::string kinds;
  for (const auto& f : findings)
    if (f.severity == "problem") {
      std::string k = f.kind;
      std::replace(k.begin(), k.end(), '_', ' ');
      kinds += (kinds.empty() ? "" : ", ") + k;
    }
  return s + fmt::format("{} problem{}: {}", problems(), problems() == 1 ? "" : "s", kinds);
}

Diagnosis diagnose_records(const std::vector<json>& records, const Config& cfg, bool has_config,
                           std::optional<double> unigram_entropy) {
  Diagnosis d;
  d.config = cfg;
  d.has_config = has_config;
  d.unigram_entropy = unigram_entropy;
  Run r{d.config, has_config, {}, {}, {}};
  for (const auto& j : records) {
    if (!j.is_object()) continue;
    const std::string ev = j.value(metric::event, "");
    if (ev == "rollback") r.rollbacks.push_back(&j);
    if (j.contains(metric::event) || !j.contains(metric::step)) continue;
    r.steps.push_back(&j);
    if (j.contains(metric::attn_max_logit) || j.contains(metric::resid_rms)) r.diag.push_back(&j);
  }
  if (r.steps.empty())
    throw FormatError("metrics.jsonl has no step line: the run has not logged a step yet");
  d.diag_records = static_cast<long>(r.diag.size());
  d.per_head = !r.diag.empty() && r.diag.front()->contains(metric::attn_max_logit_head);
  if (const auto end = run_end_of(records)) {
    d.steps = end->step;
    d.end_reason = end->reason;
    d.end_detail = end->detail;
    d.final_loss = end->train_loss;
  }
  for (const json* j : r.steps)
    if (j->value(metric::step, 0L) == 1 && std::isfinite(num(*j, metric::loss)))
      d.initial_loss = num(*j, metric::loss);

  check_attention(r, d.findings);
  check_output_logits(r, d.findings);
  check_spikes(r, d.findings);
  check_residual(r, d.findings);
  check_plateau(r, d.initial_loss, d.final_loss, d.unigram_entropy, d.findings);
  check_guard(r, d.end_reason, d.end_detail, d.findings);
  // Problems first, in the order above; notes after.
  std::stable_partition(d.findings.begin(), d.findings.end(),
                        [](const DoctorFinding& f) { return f.severity == "problem"; });

  if (r.diag.empty()) {
    const long every = std::max(1L, std::max<long>(cfg.train.log_interval, d.steps / 100));
    d.unchecked = {"attention-logit growth (attn_max_logit, attn_entropy)",
                   "the largest output logit (max_logit_raw; log Z drift was checked from the "
                   "step lines)",
                   "residual-stream growth (resid_rms, resid_max)",
                   "which layers' gradients spike first (grad_norm_block)"};
    d.enable = fmt::format("diag.interval = {} (--set diag.interval={} --set diag.per_head=true)",
                           every, every);
  } else if (!d.per_head) {
    d.unchecked = {"which attention head (attn_max_logit_head)"};
    d.enable = "diag.per_head = true";
  }
  if (!unigram_entropy) {
    d.unchecked.push_back(has_config ? "the unigram plateau (the training data could not be read)"
                                     : "the unigram plateau (no config.toml to find the data)");
  }
  return d;
}

double training_unigram_entropy(const Config& cfg, const std::string& run_dir) {
  // Sweeps diagnose many runs over the same data: count each corpus once per process.
  static std::mutex mu;
  static std::map<std::string, double> cache;
  const RunTokenizer tok = resolve_tokenizer(cfg, run_dir);
  const std::string key = fmt::format("{}\n{}\n{}\n{}", cfg.data.path, tok.file,
                                      cfg.data.val_fraction, cfg.model.seq_len);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (const auto it = cache.find(key); it != cache.end()) return it->second;
  }
  const TokenCorpus corpus = TokenCorpus::from_path(cfg.data.path, *tok.tok);
  const CorpusView train = corpus.split(cfg.data.val_fraction, cfg.model.seq_len).train;
  std::vector<long> counts(std::max(1, train.vocab_size()), 0);
  std::vector<int> buf(1 << 16);
  for (long i = 0; i < train.size(); i += static_cast<long>(buf.size())) {
    const long n = std::min<long>(static_cast<long>(buf.size()), train.size() - i);
    train.copy(i, n, buf.data());
    for (long k = 0; k < n; ++k) ++counts[buf[k]];
  }
  double h = 0;
  const double total = static_cast<double>(train.size());
  for (long c : counts)
    if (c > 0) h -= (c / total) * std::log(c / total);
  std::lock_guard<std::mutex> lock(mu);
  cache[key] = h;
  return h;
}

Diagnosis diagnose_run(const std::string& run_dir) {
  const fs::path dir(run_dir);
  if (!fs::is_directory(dir))
    throw InputError(fmt::format("{} is not a directory (expected a run directory)", run_dir));
  const fs::path mpath = dir / "metrics.jsonl";
  std::ifstream in(mpath);
  if (!in)
    throw FormatError(
        fmt::format("{} has no metrics.jsonl: not a run directory, or its run has "
                    "not started",
                    run_dir));
  std::vector<json> records;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    try {
      records.push_back(json::parse(lines[i]));
    } catch (const json::parse_error& e) {
      // A torn last line is what a killed process leaves; anything else is a damaged file.
      if (i + 1 == lines.size()) break;
      throw FormatError(
          fmt::format("{} line {}: not a JSON object ({})", mpath.string(), i + 1, e.what()));
    }
    if (!records.back().is_object())
      throw FormatError(fmt::format("{} line {}: not a JSON object", mpath.string(), i + 1));
  }
  Config cfg;
  bool has_config = false;
  const fs::path cpath = dir / "config.toml";
  if (fs::exists(cpath)) {
    try {
      cfg = load_config(cpath.string());
    } catch (const ConfigError& e) {
      throw FormatError(fmt::format("{}: {}", cpath.string(), e.what()));
    }
    has_config = true;
  }
  std::optional<double> h;
  if (has_config) {
    try {
      h = training_unigram_entropy(cfg, run_dir);
    } catch (const Error&) {
      // Data moved or unreadable: the plateau check is listed as unchecked.
    }
  }
  try {
    Diagnosis d = diagnose_records(records, cfg, has_config, h);
    d.run_dir = run_dir;
    return d;
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{}: {}", mpath.string(), e.what()));
  }
}

nlohmann::json to_json(const Diagnosis& d) {
  auto opt = [](const std::optional<double>& v) {
    return v && std::isfinite(*v) ? json(*v) : json(nullptr);
  };
  json findings = json::array();
  for (const auto& f : d.findings)
    findings.push_back({{"kind", f.kind},
                        {"severity", f.severity},
                        {"title", f.title},
                        {"first_step", f.first_step},
                        {"last_step", f.last_step},
                        {"evidence", f.evidence},
                        {"remedies", f.remedies},
                        {"confirm", f.confirm},
                        {"values", f.values}});
  const Config& c = d.config;
  return {{"run_dir", d.run_dir},
          {"verdict", d.verdict()},
          {"healthy", d.healthy()},
          {"problems", d.problems()},
          {"steps", d.steps},
          {"planned_steps", d.has_config ? json(c.train.steps) : json(nullptr)},
          {"end_reason", d.end_reason},
          {"end_detail", d.end_detail},
          {"config", d.has_config ? json{{"placement", to_string(c.model.placement)},
                                         {"n_layer", c.model.n_layer},
                                         {"d_model", c.model.d_model},
                                         {"qk_norm", to_string(c.model.qk_norm)},
                                         {"lr", c.optim.lr},
                                         {"warmup_steps", c.optim.warmup_steps},
                                         {"weight_decay", c.optim.weight_decay},
                                         {"z_loss", c.train.z_loss}}
                                  : json(nullptr)},
          {"initial_loss", opt(d.initial_loss)},
          {"final_train_loss", opt(d.final_loss)},
          {"unigram_entropy", opt(d.unigram_entropy)},
          {"diagnostics", {{"records", d.diag_records}, {"per_head", d.per_head}}},
          {"findings", findings},
          {"unchecked", d.unchecked},
          {"enable", d.enable}};
}

}  // namespace normlab
