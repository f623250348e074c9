// What `normlab doctor`'s checks share: the run as a check receives it, the signature of a check,
// and small helpers for reading step records and writing messages. Private to src/doctor: each
// check_*.cpp defines one check, doctor.cpp runs them all from its table.
#pragma once
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "doctor/doctor.h"
#include "normlab/config.h"

namespace normlab::doctor_detail {

using json = nlohmann::json;
using T = DoctorThresholds;

inline double num(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}
// A per-layer array field as doubles (NaN for null).
inline std::vector<double> vec(const json& j, const char* key) {
  std::vector<double> out;
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const auto& x : *it) out.push_back(x.is_number() ? x.get<double>() : NAN);
  return out;
}
// Short numbers for messages: 3 significant digits, no exponent below 1e5.
inline std::string g(double v) {
  if (!std::isfinite(v)) return "non-finite";
  if (std::fabs(v) >= 1e5 || (v != 0 && std::fabs(v) < 1e-3)) return fmt::format("{:.2e}", v);
  return fmt::format("{:.3g}", v);
}
inline std::string factor(double a, double b) {
  if (!(std::isfinite(a) && std::isfinite(b)) || b <= 0) return "";
  return fmt::format(" ({}x the step-1 value {})", g(a / b), g(b));
}
inline double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
// Name of residual boundary k (docs/metrics.md: 0 embedding, 2l+1 after block l's attention,
// 2l+2 after block l).
inline std::string boundary(std::size_t k) {
  if (k == 0) return "the embedding";
  const std::size_t l = (k - 1) / 2;
  return k % 2 ? fmt::format("after block {}'s attention", l) : fmt::format("after block {}", l);
}

// The run as every check receives it: the step records sorted by kind, and what the run started
// and ended with (diagnose_records fills all of it before the first check runs; the latter are
// set after the records are read, hence their default initializers).
struct Run {
  const Config& cfg;
  bool has_config;
  std::vector<const json*> steps;  // step lines, in order
  std::vector<const json*> diag;   // those with diagnostics fields
  std::vector<const json*> rollbacks;

  // Step 1's loss; the end's train loss; the unigram entropy of the training tokens (none: the
  // plateau is not checked); the end event's reason and detail ("" without one).
  std::optional<double> initial_loss = {}, final_loss = {};
  std::optional<double> unigram_entropy = {};
  std::string end_reason = {}, end_detail = {};
  // The end's val loss and step (the step the run reached); the run directory ("" when the
  // records were given without one).
  std::optional<double> final_val_loss = {};
  long end_step = 0;
  std::string run_dir = {};
  // The `missing` event lines (docs/metrics.md): statistics the writer could not measure.
  std::vector<const json*> missing = {};

  // A PyTorch run written by normlab.torch (source.kind = "torch"): remedies in its words.
  bool torch() const { return cfg.source.kind == SourceKind::torch; }
  // Whether the config holds the run's own value of `key`: there is a config.toml and the key is
  // not in source.unknown. No check or remedy rests on a key it does not know.
  bool knows(std::string_view key) const { return has_config && cfg.source.knows(key); }
};

// optim.lr as messages show it; "unknown" when the run's config does not know it.
inline std::string lr_text(const Run& r) {
  return r.knows("optim.lr") ? g(r.cfg.optim.lr) : "unknown";
}

// ---- Remedies (remedy.cpp) ----
using Sets = std::vector<std::pair<std::string, std::string>>;
// A remedy that is the config changes `set`: `text` says it for a normlab run (with its --set
// options; phrase() rewrites them for a PyTorch run). Tried when the run's config already holds
// every value (and knows every key).
Remedy config_remedy(const Run& r, const std::string& text, Sets set);
// A remedy in words only (not a config change).
Remedy advice(const Run& r, const std::string& text);
// "lower the learning rate to lr / factor": a config remedy when the run's lr is known, words only
// when it is not. `why` follows the value.
Remedy lower_lr(const Run& r, double to, const std::string& why = {});
// `text` for the run's origin: for a PyTorch run every `--set key=value` becomes what to change
// in its own code (one row per key in remedy.cpp), `diag.*` the Probe's arguments.
std::string phrase(const Run& r, const std::string& text);
// A number as --set takes it, exactly (the shortest text that reads back to it): "0.2", "1e-05".
inline std::string num_text(double v) { return fmt::format("{}", v); }
// values["statistic"] of a problem finding (doctor.h).
json statistic(const std::string& name, double value, double threshold, long onset_step,
               const char* bad_when = "at_least");
// After the checks: each tried remedy says what the run shows with it, and a problem whose every
// config remedy was tried says that none applies.
void settle_remedies(const Run& r, std::vector<DoctorFinding>& findings);

// The first of `needs` (metrics.jsonl fields) with fewer than `min_records` step lines holding a
// number, or named by a `missing` event: the check's "not checked" entry (evidence.cpp).
std::optional<NotChecked> missing_evidence(const Run& r, const std::string& check,
                                           const std::vector<std::string>& needs,
                                           long min_records);

// A check appends what it found (zero, one or more findings) to `out`.
using CheckFn = void (*)(const Run& r, std::vector<DoctorFinding>& out);

// The checks, one file each (check_<name>.cpp); doctor.cpp's table runs them in order.
void check_diverged(const Run& r, std::vector<DoctorFinding>& out);
void check_attention(const Run& r, std::vector<DoctorFinding>& out);
void check_output_logits(const Run& r, std::vector<DoctorFinding>& out);
void check_spikes(const Run& r, std::vector<DoctorFinding>& out);
void check_residual(const Run& r, std::vector<DoctorFinding>& out);
void check_dyt(const Run& r, std::vector<DoctorFinding>& out);
void check_plateau(const Run& r, std::vector<DoctorFinding>& out);
void check_guard(const Run& r, std::vector<DoctorFinding>& out);
void check_optimizer(const Run& r, std::vector<DoctorFinding>& out);

}  // namespace normlab::doctor_detail
