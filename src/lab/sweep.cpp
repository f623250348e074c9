#include "lab/sweep.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

#include "io/metrics.h"
#include "normlab/config_file.h"
#include "lab/seeds.h"
#include "lab/variants.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "train/divergence.h"

namespace fs = std::filesystem;

namespace normlab {

GridAxis parse_grid_axis(const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    throw ConfigError({fmt::format("--grid '{}': expected KEY=v1,v2,... or KEY=a:b:Nlog", spec)});
  GridAxis a;
  a.key = spec.substr(0, eq);
  const std::string rhs = spec.substr(eq + 1);
  if (rhs.find(':') != std::string::npos) {
    double lo = 0, hi = 0;
    int n = 0;
    char kind[8] = {};
    if (std::sscanf(rhs.c_str(), "%lf:%lf:%d%3s", &lo, &hi, &n, kind) != 4 || n < 1 ||
        (std::string(kind) != "log" && std::string(kind) != "lin") ||
        (std::string(kind) == "log" && (lo <= 0 || hi <= 0)))
      throw ConfigError({fmt::format("--grid '{}': a range is a:b:Nlog or a:b:Nlin with N >= 1 "
                                     "(log needs a, b > 0)", spec)});
    for (int i = 0; i < n; ++i) {
      const double t = n == 1 ? 0.0 : static_cast<double>(i) / (n - 1);
      const double v = std::string(kind) == "log" ? lo * std::pow(hi / lo, t) : lo + (hi - lo) * t;
      a.values.push_back(fmt::format("{:.6g}", v));
    }
  } else {
    std::size_t start = 0;
    while (start <= rhs.size()) {
      const auto comma = rhs.find(',', start);
      const std::string v = rhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (v.empty()) throw ConfigError({fmt::format("--grid '{}': empty value", spec)});
      a.values.push_back(v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return a;
}

std::vector<SweepPoint> expand_grid(const std::vector<GridAxis>& axes) {
  std::vector<SweepPoint> pts = {SweepPoint{}};
  for (const auto& ax : axes) {
    std::vector<SweepPoint> next;
    for (const auto& p : pts)
      for (const auto& v : ax.values) {
        SweepPoint q = p;
        q.overrides.emplace_back(ax.key, v);
        next.push_back(q);
      }
    pts = std::move(next);
  }
  for (auto& p : pts) {
    std::string n;
    for (const auto& [k, v] : p.overrides) {
      const std::string shortk = k.substr(k.find('.') + 1);
      n += (n.empty() ? "" : "_") + shortk + "-" + v;
    }
    for (char& c : n)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
    p.name = n.empty() ? "base" : n;
  }
  return pts;
}

std::vector<std::string> mup_base_mismatches(const std::vector<Config>& cfgs,
                                             const std::vector<SweepPoint>& points,
                                             const Config& base) {
  std::vector<std::string> out;
  const auto shape = [](const ModelConfig& m) {
    return fmt::format("d_ff {}, {} heads of {}", m.d_ff, m.n_head, m.head_size());
  };
  for (std::size_t i = 0; i < cfgs.size() && i < points.size(); ++i) {
    const ModelConfig& m = cfgs[i].model;
    if (m.parametrization != Parametrization::mup || m.d_model == m.mup_base_width) continue;
    const ModelConfig* at_base = nullptr;
    std::string where;
    for (std::size_t j = 0; j < cfgs.size() && !at_base; ++j)
      if (cfgs[j].model.d_model == m.mup_base_width)
        at_base = &cfgs[j].model, where = "the point " + points[j].name;
    if (!at_base && base.model.d_model == m.mup_base_width)
      at_base = &base.model, where = "the config";
    if (!at_base) continue;
    const ModelConfig b = mup_base_model(m);
    if (b.d_ff == at_base->d_ff && b.n_head == at_base->n_head &&
        b.head_size() == at_base->head_size())
      continue;
    out.push_back(fmt::format(
        "{}: its μP base model (d_model {}: {}) is not {} at d_model {} ({}), so its learning "
        "rate is not the one tuned there; set model.d_ff_mult = {:.4g} so that d_ff follows "
        "d_model{}",
        points[i].name, b.d_model, shape(b), where, at_base->d_model, shape(*at_base),
        static_cast<double>(at_base->d_ff) / at_base->d_model,
        b.n_head != at_base->n_head || b.head_size() != at_base->head_size()
            ? " (and model.mup_base_head_dim for the heads)"
            : ""));
  }
  return out;
}

std::vector<SweepPoint> expand_seeds(const std::vector<SweepPoint>& points, int seeds) {
  if (seeds < 1) throw ConfigError({fmt::format("seeds = {} must be >= 1", seeds)});
  std::vector<SweepPoint> out;
  for (const auto& p : points)
    for (int k = 0; k < seeds; ++k) {
      SweepPoint q = p;
      q.seed = k;
      q.name = seed_dir_name(p.name, k);
      out.push_back(std::move(q));
    }
  return out;
}

void apply_seed(Config& cfg, const SweepPoint& p) {
  cfg.train.seed += static_cast<std::uint64_t>(p.seed);
}

bool sweep_status_unfinished(const std::string& status) {
  return status == "interrupted" || status == "not started";
}

bool sweep_point_finished(const std::string& dir) {
  std::ifstream st(fs::path(dir) / "sweep_status.json");
  if (!st) return false;
  try {
    const auto s = nlohmann::json::parse(st).value("status", "");
    return s == "done" || s == "diverged";
  } catch (...) {
    return false;
  }
}

namespace {
// The loss of step 1 from a run's metrics (NaN when it has none).
double initial_loss_of(const std::vector<nlohmann::json>& m) {
  for (const auto& r : m)
    if (!r.contains(metric::event) && r.value(metric::step, 0L) == 1)
      return step_record_from_json(r).loss;
  return NAN;
}
}  // namespace

namespace {
void write_sweep_status(const std::string& dir, const std::string& status,
                        const std::string& message, long steps, long stop_step) {
  const fs::path tmp = fs::path(dir) / "sweep_status.json.tmp";
  std::ofstream(tmp) << nlohmann::json{{"status", status}, {"message", message},
                                       {"steps", steps}, {"stop_step", stop_step}}.dump()
                     << '\n';
  fs::rename(tmp, fs::path(dir) / "sweep_status.json");
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string run_sweep_point(const Config& cfg, const std::string& dir, const TrainHooks& hooks) {
  const bool resume = fs::exists(fs::path(dir) / "checkpoints" / "latest");
  Trainer trainer(cfg, dir, resume);
  const TrainResult res = trainer.run(with_divergence_rule(hooks, trainer, dir));
  if (res.stop_reason == "interrupted") return "interrupted";
  const std::string status = res.diverged ? "diverged" : "done";
  write_sweep_status(dir, status, res.stop_reason, res.steps, res.stop_step);
  return status;
}

std::string external_command(const std::string& templ, const SweepPoint& p, const std::string& dir) {
  std::map<std::string, std::string> vars{{"out", dir}, {"seed", std::to_string(p.seed)}};
  for (const auto& [k, v] : p.overrides) vars[k] = v;
  std::string out;
  for (std::size_t i = 0; i < templ.size(); ++i) {
    const std::size_t close = templ[i] == '{' ? templ.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += templ[i];
      continue;
    }
    const std::string name = templ.substr(i + 1, close - i - 1);
    const auto it = vars.find(name);
    if (it == vars.end()) {
      std::string known;
      for (const auto& [k, v] : vars) known += (known.empty() ? "{" : ", {") + k + "}";
      throw ConfigError({fmt::format("--command: {{{}}} is neither a grid key nor {{out}} or "
                                     "{{seed}} (known here: {})", name, known)});
    }
    out += shell_quote(it->second);
    i = close;
  }
  return out;
}

std::string judge_external_point(const std::string& dir, int exit_code, const std::string& exit_note) {
  const fs::path mpath = fs::path(dir) / "metrics.jsonl";
  if (exit_code != 0 || !fs::exists(mpath)) {
    write_sweep_status(dir, "failed",
                       exit_code != 0 ? exit_note
                                      : fmt::format("the command wrote no {} (train through "
                                                    "normlab.torch.Probe with out={{out}})",
                                                    mpath.string()),
                       0, 0);
    return "failed";
  }
  const auto m = read_metrics(dir);
  const auto end = run_end_of(m);
  if (!end || !end->from_event) {
    write_sweep_status(dir, "failed", "the command's run has no end event (close the probe)", 0, 0);
    return "failed";
  }
  if (end->reason == "interrupted") return "interrupted";
  long total = end->step;
  try {
    total = load_config((fs::path(dir) / "config.toml").string()).train.steps;
  } catch (const Error&) {
    // no readable config.toml: the run is judged on the steps it reached
  }
  DivergenceRule rule(total);
  std::optional<std::string> why;
  long at = end->step;
  for (const auto& r : m) {
    if (r.contains(metric::event) || !r.contains(metric::step)) continue;
    const StepRecord s = step_record_from_json(r);
    if ((why = rule.observe(s))) {
      at = s.step;
      break;
    }
  }
  if (!why && end->reason == "diverged") why = end->detail;
  // The end clause for a run that reached train.steps (not one stopped at train.stop_at).
  if (!why && end->step >= total) why = rule.judge_end(end->val_loss, end->train_loss);
  write_sweep_status(dir, why ? "diverged" : "done", why.value_or(""), end->step, why ? at : 0);
  return why ? "diverged" : "done";
}

SweepRun read_sweep_run(const std::string& dir, const SweepPoint& p) {
  SweepRun r;
  r.point = p;
  try {
    std::optional<RunEnd> end;
    if (fs::exists(fs::path(dir) / "metrics.jsonl")) {
      const auto m = read_metrics(dir);
      r.initial_loss = initial_loss_of(m);
      end = run_end_of(m);
      for (auto it = m.rbegin(); it != m.rend() && !r.max_attn_logit; ++it)
        if (it->contains(metric::attn_max_logit)) {
          double mx = 0;
          for (const auto& v : (*it)[metric::attn_max_logit])
            if (v.is_number()) mx = std::fmax(mx, v.get<double>());
          r.max_attn_logit = mx;
        }
      for (const auto& rec : m) {
        if (rec.contains(metric::qk_clip_total) && rec[metric::qk_clip_total].is_number())
          r.qk_clip_total = rec[metric::qk_clip_total].get<long>();
        if (rec.contains(metric::qk_clip_max_logit) && rec[metric::qk_clip_max_logit].is_number()) {
          const double x = rec[metric::qk_clip_max_logit].get<double>();
          r.qk_clip_max_logit =
              std::isnan(r.qk_clip_max_logit) ? x : std::fmax(r.qk_clip_max_logit, x);
        }
      }
      if (const fs::path c = fs::path(dir) / "config.toml"; fs::exists(c))
        r.qk_clip_tau = load_config(c.string()).optim.qk_clip;
    }
    if (end) {
      r.steps = end->step;
      r.final_val_loss = end->val_loss;
      r.train_loss = end->train_loss;
    }
    std::ifstream st(fs::path(dir) / "sweep_status.json");
    if (st) {
      const auto sj = nlohmann::json::parse(st);
      r.status = sj.value("status", "failed");
      r.message = sj.value("message", "");
      const long stop = sj.value("stop_step", 0L);
      if (stop > 0) r.steps = stop;
    } else if (!end) {
      r.status = "not started";
    } else if (end->reason == "interrupted") {
      r.status = "interrupted";
    } else {
      r.status = "failed";
      r.message = "no sweep_status.json (the run stopped without finishing)";
    }
  } catch (const std::exception& e) {
    r.status = "failed";
    r.message = e.what();
  }
  if (r.status == "done") r.final_loss = r.final_val_loss ? r.final_val_loss : r.train_loss;
  return r;
}

namespace {
// The sensitivity, best loss and best lr of one seed's runs (s.lrs, s.final_losses filled).
void finish_sensitivity(Sensitivity& s) {
  const std::vector<double>& init = s.initial_losses;
  s.best_loss = INFINITY;
  for (std::size_t i = 0; i < s.lrs.size(); ++i)
    if (std::isfinite(s.final_losses[i]) && s.final_losses[i] < s.best_loss) {
      s.best_loss = s.final_losses[i];
      s.best_lr = s.lrs[i];
    }
  if (std::isfinite(s.best_loss)) {
    double acc = 0;
    for (std::size_t i = 0; i < s.lrs.size(); ++i) {
      const double fl = std::isfinite(s.final_losses[i]) ? s.final_losses[i] : INFINITY;
      acc += std::fmin(fl, init[i]) - s.best_loss;
    }
    s.sensitivity = acc / s.lrs.size();
  }
}

// One variant over several seeds (per_seed[k]: seed k's runs, finished): the means, and the band.
Sensitivity combine_seeds(const std::vector<Sensitivity>& per_seed) {
  Sensitivity s = per_seed[0];
  s.seeds = static_cast<int>(per_seed.size());
  s.diverged = 0;
  for (const auto& k : per_seed) {
    s.seed_sensitivity.push_back(k.sensitivity);
    s.seed_best_loss.push_back(k.best_loss);
    s.seed_best_lr.push_back(k.best_lr);
    s.diverged += k.diverged;
  }
  s.sensitivity = seed_stats(s.seed_sensitivity).mean;
  s.best_loss = seed_stats(s.seed_best_loss).mean;
  s.final_losses.assign(s.lrs.size(), NAN);
  s.final_loss_min.assign(s.lrs.size(), NAN);
  s.final_loss_max.assign(s.lrs.size(), NAN);
  s.best_lr = NAN;
  double best_mean = INFINITY;
  for (std::size_t i = 0; i < s.lrs.size(); ++i) {
    std::vector<double> at, init;
    for (const auto& k : per_seed) {
      // The same lr in every seed (the grid is the same); matched by value all the same.
      for (std::size_t j = 0; j < k.lrs.size(); ++j)
        if (k.lrs[j] == s.lrs[i]) {
          at.push_back(k.final_losses[j]);
          init.push_back(k.initial_losses[j]);
          break;
        }
    }
    const SeedStats st = seed_stats(at);
    s.final_losses[i] = st.mean;
    s.final_loss_min[i] = st.min;
    s.final_loss_max[i] = st.max;
    s.initial_losses[i] = seed_stats(init).mean;
    if (std::isfinite(st.mean) && st.mean < best_mean) {
      best_mean = st.mean;
      s.best_lr = s.lrs[i];
    }
  }
  return s;
}
}  // namespace

std::vector<Sensitivity> lr_sensitivity(const std::vector<SweepRun>& runs, const std::string& lr_key) {
  // label -> seed index -> that seed's runs
  std::map<std::string, std::map<int, Sensitivity>> by;
  std::vector<std::string> order;
  for (const auto& r : runs) {
    Sensitivity key;
    double lr = NAN;
    std::string label;
    for (const auto& [k, v] : r.point.overrides) {
      if (k == lr_key) {
        lr = std::stod(v);
        continue;
      }
      key.variant[k] = v;
      label += (label.empty() ? "" : ", ") + k + "=" + v;
    }
    if (label.empty()) label = "all";
    if (!by.count(label)) order.push_back(label);
    if (!by[label].count(r.point.seed)) {
      key.label = label;
      by[label][r.point.seed] = key;
    }
    Sensitivity& s = by[label][r.point.seed];
    s.lrs.push_back(lr);
    s.final_losses.push_back(r.status == "done" && r.final_loss ? *r.final_loss : NAN);
    if (r.status != "done") ++s.diverged;
    s.initial_losses.push_back(r.initial_loss);
  }
  std::vector<Sensitivity> out;
  for (const auto& label : order) {
    std::vector<Sensitivity> per_seed;
    for (auto& [k, s] : by[label]) {
      finish_sensitivity(s);
      per_seed.push_back(s);
    }
    out.push_back(per_seed.size() == 1 ? per_seed[0] : combine_seeds(per_seed));
  }
  return out;
}

nlohmann::json sweep_json(const std::vector<GridAxis>& axes, const std::vector<SweepRun>& runs,
                          const std::vector<Sensitivity>& sens, const std::string& lr_key) {
  auto num = [](std::optional<double> v) { return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["lr_key"] = lr_key;
  for (const auto& a : axes) j["grid"][a.key] = a.values;
  int seeds = 1;
  for (const auto& r : runs) seeds = std::max(seeds, r.point.seed + 1);
  if (seeds > 1) j["seeds"] = seeds;
  j["runs"] = nlohmann::json::array();
  for (const auto& r : runs) {
    nlohmann::json o;
    for (const auto& [k, v] : r.point.overrides) o[k] = v;
    j["runs"].push_back({{"name", r.point.name}, {"dir", r.point.name}, {"overrides", o},
                         {"status", r.status}, {"message", r.message},
                         {"steps", r.steps}, {"initial_loss", num(r.initial_loss)},
                         {"final_loss", num(r.final_loss)}, {"final_val_loss", num(r.final_val_loss)},
                         {"train_loss", num(r.train_loss)},
                         {"max_attn_logit", num(r.max_attn_logit)}});
    if (seeds > 1) j["runs"].back()["seed"] = r.point.seed;
  }
  j["sensitivity"] = nlohmann::json::array();
  auto nums = [&](const std::vector<double>& xs) {
    nlohmann::json a = nlohmann::json::array();
    for (double x : xs) a.push_back(num(x));
    return a;
  };
  for (const auto& s : sens) {
    j["sensitivity"].push_back({{"variant", s.variant}, {"label", s.label},
                                {"sensitivity", num(s.sensitivity)}, {"best_loss", num(s.best_loss)},
                                {"best_lr", num(s.best_lr)}, {"lrs", s.lrs},
                                {"final_losses", nums(s.final_losses)},
                                {"diverged", s.diverged}});
    if (s.seeds > 1) {
      nlohmann::json& e = j["sensitivity"].back();
      e["seeds"] = s.seeds;
      e["sensitivity_stats"] = seed_stats_json(seed_stats(s.seed_sensitivity));
      e["best_loss_stats"] = seed_stats_json(seed_stats(s.seed_best_loss));
      e["seed_sensitivity"] = nums(s.seed_sensitivity);
      e["seed_best_loss"] = nums(s.seed_best_loss);
      e["seed_best_lr"] = nums(s.seed_best_lr);
      e["final_loss_min"] = nums(s.final_loss_min);
      e["final_loss_max"] = nums(s.final_loss_max);
    }
  }
  if (seeds > 1) j["notes"] = sensitivity_notes(sens);
  return j;
}

std::vector<std::string> sensitivity_notes(const std::vector<Sensitivity>& sens) {
  std::vector<std::pair<std::string, SeedStats>> by_sens, by_best;
  for (const auto& s : sens) {
    if (s.seeds < 2) continue;
    by_sens.emplace_back(s.label, seed_stats(s.seed_sensitivity));
    by_best.emplace_back(s.label, seed_stats(s.seed_best_loss));
  }
  auto notes = seed_spread_notes(by_sens, "LR sensitivity");
  for (auto& n : seed_spread_notes(by_best, "best final loss")) notes.push_back(std::move(n));
  return notes;
}

std::string sensitivity_table(const std::vector<Sensitivity>& sens) {
  if (std::any_of(sens.begin(), sens.end(), [](const Sensitivity& s) { return s.seeds > 1; })) {
    std::string t =
        "| variant | seeds | LR sensitivity (final val loss) | best final val loss | best lr (per "
        "seed) | diverged |\n"
        "|---|---|---|---|---|---|\n";
    auto lr_text = [](double v) { return std::isfinite(v) ? fmt::format("{:.3g}", v) : std::string("-"); };
    for (const auto& s : sens) {
      std::string per_seed;
      for (double lr : s.seed_best_lr) per_seed += (per_seed.empty() ? "" : ", ") + lr_text(lr);
      t += fmt::format("| {} | {} | {} | {} | {} ({}) | {}/{} |\n", s.label, s.seeds,
                       format_spread(seed_stats(s.seed_sensitivity)),
                       format_spread(seed_stats(s.seed_best_loss)), lr_text(s.best_lr), per_seed,
                       s.diverged, s.lrs.size() * s.seeds);
    }
    t += "\nmean ± sample standard deviation (min–max) over the seeds, each seed's sensitivity "
         "computed over its own runs; best lr: the lr of the lowest final val loss averaged over "
         "the seeds, then each seed's own. Seed k trains with train.seed + k (initialisation and "
         "data order).\n";
    const auto notes = sensitivity_notes(sens);
    for (const auto& n : notes) t += "\n" + n + ".";
    if (!notes.empty()) t += "\n";
    t += "\nFinal val loss: the mean validation cross-entropy over train.eval_batches batches at "
         "the end of each run (the train loss, last 20 steps, for runs without evaluation). LR "
         "sensitivity (Wortsman et al. 2023): the mean over the lr grid of min(final val loss, "
         "initial loss) - best final val loss; a diverged run counts with its initial loss.\n";
    return t;
  }
  std::string t =
      "| variant | LR sensitivity (final val loss) | best final val loss | best lr | diverged |\n"
      "|---|---|---|---|---|\n";
  auto fixed = [](double v) { return std::isfinite(v) ? fmt::format("{:.4f}", v) : std::string("-"); };
  for (const auto& s : sens)
    t += fmt::format("| {} | {} | {} | {} | {}/{} |\n", s.label, fixed(s.sensitivity),
                     fixed(s.best_loss),
                     std::isfinite(s.best_lr) ? fmt::format("{:.3g}", s.best_lr) : std::string("-"),
                     s.diverged, s.lrs.size());
  t += "\nFinal val loss: the mean validation cross-entropy over train.eval_batches batches at the end "
       "of each run (the train loss, last 20 steps, for runs without evaluation). LR sensitivity "
       "(Wortsman et al. 2023): the mean over the lr grid of min(final val loss, initial loss) - "
       "best final val loss; a diverged run counts with its initial loss.\n";
  return t;
}

std::string runs_table(const std::vector<SweepRun>& runs) {
  auto fixed = [](std::optional<double> v) {
    return v && std::isfinite(*v) ? fmt::format("{:.4f}", *v) : std::string("-");
  };
  std::string t =
      "| run | status | step | train loss (last 20 steps) | final val loss | why it stopped |\n"
      "|---|---|---|---|---|---|\n";
  for (const auto& r : runs)
    t += fmt::format("| {} | {} | {} | {} | {} | {} |\n", r.point.name, r.status, r.steps,
                     fixed(r.train_loss), fixed(r.final_val_loss), r.message);
  return t;
}

SweepSummary summarize_sweep(const std::string& out, const std::vector<GridAxis>& axes,
                             const std::vector<SweepPoint>& points, const std::string& lr_key) {
  SweepSummary s;
  for (const auto& p : points) {
    s.runs.push_back(read_sweep_run((fs::path(out) / p.name).string(), p));
    if (sweep_status_unfinished(s.runs.back().status))
      s.unfinished.push_back(s.runs.back().status == "interrupted"
                                 ? fmt::format("{} (at step {})", p.name, s.runs.back().steps)
                                 : p.name + " (not started)");
  }
  if (!s.unfinished.empty()) return s;
  s.lr_grid = std::any_of(axes.begin(), axes.end(), [&](const GridAxis& a) { return a.key == lr_key; });
  if (s.lr_grid) s.sensitivity = lr_sensitivity(s.runs, lr_key);
  s.json = sweep_json(axes, s.runs, s.sensitivity, lr_key);
  s.table = s.lr_grid ? sensitivity_table(s.sensitivity)
                      : fmt::format("No learning-rate grid ({}): no learning-rate sensitivity.\n", lr_key);
  // With seeds: every variant's numbers over its seeds, and the spread notes (with or without an
  // lr axis; sweep.json's `variants`, its `notes` extended).
  if (const auto vs = variant_seeds(s.runs); !vs.empty()) {
    s.table += "\n" + variant_table(vs);
    s.json["variants"] = variants_json(vs);
    for (const auto& n : variant_notes(vs)) s.json["notes"].push_back(n);
  }
  std::ofstream(fs::path(out) / "sweep.json") << s.json.dump(1) << '\n';
  std::ofstream(fs::path(out) / "sensitivity.md") << runs_table(s.runs) << '\n' << s.table;
  return s;
}

}  // namespace normlab
