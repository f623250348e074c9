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
#include "train/run_data.h"
#include "train/run_tokenizer.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {

using json = nlohmann::json;

}  // namespace

namespace doctor_detail {

// Every check, in the order of its findings in the report (problems first, then notes, each group
// in this order). A new condition is one check_<name>.cpp and one row here.
struct Check {
  const char* name;
  CheckFn run;
};
const Check kChecks[] = {
    {"divergence", check_diverged},
    {"attention-logit growth", check_attention},
    {"output-logit divergence", check_output_logits},
    {"loss and gradient-norm spikes", check_spikes},
    {"optimizer: second moment and update spikes", check_optimizer},
    {"residual-stream growth", check_residual},
    {"DyT / Derf saturation", check_dyt},
    {"unigram plateau", check_plateau},
    {"guard events", check_guard},
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

std::string Diagnosis::verdict() const {
  std::string s;
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
      if (diag_records == 0) s += " (diagnostics off, some signals unchecked)";
      return s;
    }
  } else if (healthy()) {
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

  for (const auto& check : doctor_detail::kChecks) check.run(r, d.findings);
  // Problems first, in the table's order; notes after.
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
  const TokenCorpus corpus = TokenCorpus::from_path(run_data_path(cfg.data, run_dir), *tok.tok);
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
          {"finished", d.finished()},
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
