// `normlab doctor`'s analysis: from a run's metrics.jsonl and config.toml to a Diagnosis. Each
// check is one function over the step records, in its own file (check_*.cpp); this file reads the
// run, runs the checks from one table and assembles the report. docs/doctor.md describes the checks
// and their thresholds.
#include "doctor/doctor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "doctor/doctor_detail.h"
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

}  // namespace

namespace doctor_detail {

namespace {
bool dyt_like(NormKind n) { return n == NormKind::dyt || n == NormKind::derf; }
bool dyt_like(QKNormKind n) { return n == QKNormKind::dyt || n == QKNormKind::derf; }
bool found(const std::vector<DoctorFinding>& out, const char* kind) {
  return std::any_of(out.begin(), out.end(),
                     [&](const DoctorFinding& f) { return f.kind == kind; });
}
}  // namespace

// Every check, in the order of its findings in the report (problems first, then notes, each group
// in this order), with the metrics.jsonl fields it needs on at least `min_records` step lines and
// whether it applies to the run at all (given the findings of the checks before it). A new
// condition is one check_<name>.cpp and one row here.
struct Check {
  const char* name;
  CheckFn run;
  std::vector<std::string> needs;
  long min_records;
  bool (*applies)(const Run& r, const std::vector<DoctorFinding>& before);
};
const Check kChecks[] = {
    {"divergence", check_diverged, {metric::loss}, 1, nullptr},
    {"attention-logit growth", check_attention, {metric::attn_max_logit}, 1, nullptr},
    {"output-logit divergence", check_output_logits, {metric::log_z_mean}, 2, nullptr},
    {"loss and gradient-norm spikes", check_spikes, {metric::loss}, 2, nullptr},
    // It explains loss spikes: with none, there is nothing for it to look at.
    {"optimizer: second moment and update spikes",
     check_optimizer,
     {metric::rms_g2v_max, metric::update_rms},
     1,
     [](const Run&, const std::vector<DoctorFinding>& before) {
       return found(before, "loss_spikes");
     }},
    // nGPT's stream is normalised by construction.
    {"residual-stream growth", check_residual, {metric::resid_rms}, 1,
     [](const Run& r, const std::vector<DoctorFinding>&) {
       return r.cfg.model.placement != Placement::ngpt;
     }},
    {"DyT / Derf saturation", check_dyt, {metric::dyt_saturated}, T::kDytSaturatedRecords,
     [](const Run& r, const std::vector<DoctorFinding>&) {
       return dyt_like(r.cfg.model.norm) || dyt_like(r.cfg.model.qk_norm);
     }},
    {"unigram plateau", check_plateau, {metric::loss}, 1, nullptr},
    {"guard events", check_guard, {metric::loss}, 1, nullptr},
};

}  // namespace doctor_detail

long Diagnosis::problems() const {
  return std::count_if(findings.begin(), findings.end(),
                       [](const DoctorFinding& f) { return f.severity == "problem"; });
}

bool Diagnosis::finished() const {
  if (end_reason == "done" || end_reason == "diverged") return true;
  return end_reason.empty() && has_config && steps >= config.train.steps;
}

bool Diagnosis::evidence_lost() const {
  return std::any_of(not_checked.begin(), not_checked.end(),
                     [](const NotChecked& n) { return n.evidence_lost; });
}

namespace {
// "attention-logit growth, residual-stream growth (REASON)": the checks not performed, with the
// first one's reason (the others usually share it; docs and --json give each).
std::string not_checked_text(const std::vector<NotChecked>& v, bool lost_only) {
  std::string names, reason;
  for (const NotChecked& n : v) {
    if (lost_only && !n.evidence_lost) continue;
    names += (names.empty() ? "" : ", ") + n.check;
    if (reason.empty()) reason = n.reason;
  }
  return fmt::format("{} ({})", names, reason);
}
}  // namespace

std::string Diagnosis::verdict() const {
  std::string s;
  if (checked.empty() && problems() == 0)
    return fmt::format("not judged: no check could be performed: {}",
                       not_checked_text(not_checked, false));
  if (!finished()) {
    const std::string planned = has_config ? fmt::format(" of {}", config.train.steps) : "";
    s = end_reason == "interrupted"
            ? fmt::format("interrupted at step {}{}", steps, planned)
            : fmt::format("no end event (still running, or killed) at step {}{}", steps, planned);
    if (steps < DoctorThresholds::kMinJudgedSteps && problems() == 0)
      return s + fmt::format(": not judged (only {} step{}; doctor judges a run from {} steps on)",
                             steps, steps == 1 ? "" : "s", DoctorThresholds::kMinJudgedSteps);
    s += fmt::format(": judged on {} steps: ", steps);
    if (problems() == 0) {
      s += "no instability found so far";
      if (evidence_lost())
        s += "; not judged on " + not_checked_text(not_checked, true);
      else if (!not_checked.empty())
        s += " (some checks not performed: see \"not checked\")";
      return s;
    }
  } else if (problems() == 0 && evidence_lost()) {
    return fmt::format("not judged: no instability found by the {} check{} performed, but the "
                       "evidence of others was lost: {}",
                       checked.size(), checked.size() == 1 ? "" : "s",
                       not_checked_text(not_checked, true));
  } else if (healthy()) {
    s += "healthy (no instability found";
    const long notes = static_cast<long>(findings.size());
    if (notes) s += fmt::format("; {} note{}", notes, notes == 1 ? "" : "s");
    if (!not_checked.empty())
      s += "; not checked: " + not_checked_text(not_checked, false);
    else if (diag_records == 0)
      s += "; diagnostics off, some signals unchecked";
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
                           std::optional<double> unigram_entropy, const std::string& run_dir) {
  Diagnosis d;
  d.run_dir = run_dir;
  d.config = cfg;
  d.has_config = has_config;
  d.unigram_entropy = unigram_entropy;
  doctor_detail::Run r{d.config, has_config, {}, {}, {}};
  for (const auto& j : records) {
    if (!j.is_object()) continue;
    const std::string ev = j.value(metric::event, "");
    if (ev == "rollback") r.rollbacks.push_back(&j);
    if (ev == "missing") r.missing.push_back(&j);  // other event kinds are ignored
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
    r.final_val_loss = end->val_loss;
  }
  for (const json* j : r.steps)
    if (j->value(metric::step, 0L) == 1 && std::isfinite(doctor_detail::num(*j, metric::loss)))
      d.initial_loss = doctor_detail::num(*j, metric::loss);

  r.initial_loss = d.initial_loss;
  r.final_loss = d.final_loss;
  r.unigram_entropy = d.unigram_entropy;
  r.end_reason = d.end_reason;
  r.end_detail = d.end_detail;
  r.end_step = d.steps;
  r.run_dir = run_dir;

  for (const auto& check : doctor_detail::kChecks) {
    if (check.applies && !check.applies(r, d.findings)) continue;
    const std::size_t before = d.findings.size();
    check.run(r, d.findings);
    // What it found stands on the evidence there was; finding nothing counts only when the
    // evidence was all there.
    auto lack =
        d.findings.size() > before
            ? std::nullopt
            : doctor_detail::missing_evidence(r, check.name, check.needs, check.min_records);
    if (!lack && check.run == doctor_detail::check_plateau && !unigram_entropy)
      lack = NotChecked{check.name,
                        {metric::loss},
                        has_config ? "the unigram entropy of the training tokens is unknown: the "
                                     "training data could not be read"
                                   : "no config.toml to find the training data",
                        false};
    if (lack)
      d.not_checked.push_back(std::move(*lack));
    else
      d.checked.push_back(check.name);
  }
  doctor_detail::settle_remedies(r, d.findings);
  // Problems first, in the table's order; notes after.
  std::stable_partition(d.findings.begin(), d.findings.end(),
                        [](const DoctorFinding& f) { return f.severity == "problem"; });

  // Signals within checks that were performed (whole checks are in not_checked).
  if (r.diag.empty()) {
    const long every = std::max(1L, std::max<long>(cfg.train.log_interval, d.steps / 100));
    d.unchecked = {"the largest output logit (max_logit_raw; log Z drift was checked from the "
                   "step lines)",
                   "which layers' gradients spike first (grad_norm_block)"};
    d.enable = r.torch() ? fmt::format("Probe(..., interval={}, per_head=True)", every)
                         : fmt::format("diag.interval = {} (--set diag.interval={} --set "
                                       "diag.per_head=true)",
                                       every, every);
  } else if (!d.per_head) {
    d.unchecked = {"which attention head (attn_max_logit_head)"};
    d.enable = r.torch() ? "Probe(..., per_head=True)" : "diag.per_head = true";
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
    return diagnose_records(records, cfg, has_config, h, run_dir);
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{}: {}", mpath.string(), e.what()));
  }
}

nlohmann::json to_json(const Diagnosis& d) {
  auto opt = [](const std::optional<double>& v) {
    return v && std::isfinite(*v) ? json(*v) : json(nullptr);
  };
  json findings = json::array();
  for (const auto& f : d.findings) {
    json remedies = json::array();
    for (const Remedy& m : f.remedies) {
      json set = json::object();
      for (const auto& [key, value] : m.set) set[key] = value;
      remedies.push_back({{"text", m.text}, {"set", set}, {"tried", m.tried}});
    }
    findings.push_back({{"kind", f.kind},
                        {"severity", f.severity},
                        {"title", f.title},
                        {"first_step", f.first_step},
                        {"last_step", f.last_step},
                        {"evidence", f.evidence},
                        {"remedies", remedies},
                        {"confirm", f.confirm},
                        {"values", f.values}});
  }
  json not_checked = json::array();
  for (const NotChecked& n : d.not_checked)
    not_checked.push_back({{"check", n.check},
                           {"needs", n.needs},
                           {"reason", n.reason},
                           {"evidence_lost", n.evidence_lost}});
  const Config& c = d.config;
  // A key in source.unknown is null: its value is normlab's default, not the run's.
  const auto known = [&c](const char* key, const auto& v) {
    return c.source.knows(key) ? json(v) : json(nullptr);
  };
  return {{"run_dir", d.run_dir},
          {"verdict", d.verdict()},
          {"healthy", d.healthy()},
          {"problems", d.problems()},
          {"steps", d.steps},
          {"finished", d.finished()},
          {"planned_steps", d.has_config ? json(c.train.steps) : json(nullptr)},
          {"end_reason", d.end_reason},
          {"end_detail", d.end_detail},
          {"config", d.has_config ? json{{"placement", known("model.placement",
                                                            to_string(c.model.placement))},
                                         {"n_layer", known("model.n_layer", c.model.n_layer)},
                                         {"d_model", known("model.d_model", c.model.d_model)},
                                         {"qk_norm", known("model.qk_norm",
                                                          to_string(c.model.qk_norm))},
                                         {"lr", known("optim.lr", c.optim.lr)},
                                         {"warmup_steps",
                                          known("optim.warmup_steps", c.optim.warmup_steps)},
                                         {"weight_decay",
                                          known("optim.weight_decay", c.optim.weight_decay)},
                                         {"z_loss", known("train.z_loss", c.train.z_loss)}}
                                  : json(nullptr)},
          {"initial_loss", opt(d.initial_loss)},
          {"final_train_loss", opt(d.final_loss)},
          {"unigram_entropy", opt(d.unigram_entropy)},
          {"diagnostics", {{"records", d.diag_records}, {"per_head", d.per_head}}},
          {"source", d.has_config ? json{{"kind", to_string(c.source.kind)},
                                         {"trainer", c.source.trainer},
                                         {"unknown", c.source.unknown}}
                                  : json(nullptr)},
          {"findings", findings},
          {"checked", d.checked},
          {"not_checked", not_checked},
          {"unchecked", d.unchecked},
          {"enable", d.enable}};
}

}  // namespace normlab
