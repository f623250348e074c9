// `normlab doctor`: reads a finished (or stopped) run directory -- metrics.jsonl and config.toml --
// and says which training instabilities it shows, with the evidence (steps, layer, head, values,
// the factor against the run's own early values), the remedy the literature and normlab's own
// findings support, and what to measure to confirm it. A library function from a run directory to
// a typed Diagnosis; nothing here prints (the CLI renders it as text or JSON).
//
// Thresholds are chosen from runs made with the CLI (docs/doctor.md lists the measurements):
// healthy runs stay well inside them, the failing runs of tests/doctor/test_doctor.cpp cross them.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/config.h"

namespace normlab {

// What doctor checks against (docs/doctor.md says where each value comes from).
struct DoctorThresholds {
  // Attention-logit growth: the largest |q.k| score of any layer at or above this, or the mean
  // attention entropy of a layer below kAttnEntropyCollapse nats.
  static constexpr double kAttnLogit = 200;
  static constexpr double kAttnEntropyCollapse = 0.1;
  // Output-logit divergence: mean log Z this many nats away from its step-1 value (log V at
  // initialization), or the largest output logit before any cap at or above kOutputLogit.
  // on at least kLogZDriftSteps logged steps (a single excursion belongs to a loss spike),
  static constexpr double kLogZDrift = 5;
  static constexpr long kLogZDriftSteps = 3;
  static constexpr double kOutputLogit = 50;
  // Loss spike: a logged loss at least max(kSpikeNats, kSpikeFraction * m) above m, the lowest
  // loss logged before it. Gradient-norm spike: at least kGradSpikeFactor times the median of the
  // gradient norms logged before it (at least kGradSpikeHistory of them).
  static constexpr double kSpikeNats = 2.0;
  static constexpr double kSpikeFraction = 0.5;
  static constexpr double kGradSpikeFactor = 10;
  static constexpr int kGradSpikeHistory = 3;
  // Optimizer (diagnostics records): RMS(g^2 / v_hat) of a tensor at or above kSecondMoment, or a
  // group's update RMS at or above kUpdateSpike times the median of its earlier values (at least
  // kGradSpikeHistory of them), 1 to kSpikeLead steps before a loss spike.
  static constexpr double kSecondMoment = 3;
  static constexpr double kUpdateSpike = 5;
  static constexpr long kSpikeLead = 5;
  // Residual-stream growth: the RMS of the residual stream at some boundary at or above this.
  static constexpr double kResidRms = 100;
  // DyT / Derf saturation: the fraction of a site's inputs in the squashing function's saturated
  // range (dyt_saturated: phi'(z) < phi'(0) / 10) at or above this on at least kDytSaturatedRecords
  // diagnostics records (one record can be a transient).
  static constexpr double kDytSaturated = 0.5;
  static constexpr int kDytSaturatedRecords = 2;
  // Unigram plateau: final train loss within [H - kPlateauBelow, H + kPlateauAbove] of the
  // unigram entropy H of the training tokens, having fallen at least kPlateauDrop from step 1.
  static constexpr double kPlateauBelow = 0.2;
  static constexpr double kPlateauAbove = 0.3;
  static constexpr double kPlateauDrop = 1.0;
  // An unfinished run (interrupted, or no end event) is judged on the steps it reached, from
  // this many on; with fewer its verdict is "not judged".
  static constexpr long kMinJudgedSteps = 10;
};

// One remedy of a finding, as data (`doctor --confirm` applies and tests it).
struct Remedy {
  std::string text;  // as shown to the user, phrased for the run's origin (source.kind)
  // The config changes that apply it, as (dotted key, value text) pairs that normlab's --set
  // accepts, e.g. {{"optim.lr", "0.0015"}} or {{"model.qk_norm", "rmsnorm"}}. Empty: not
  // expressible as config changes (confirm cannot test it).
  std::vector<std::pair<std::string, std::string>> set;
  // Already in the run's config (every `set` value equals the config's): doctor does not advise
  // it again; `text` then says what the run shows with it.
  bool tried = false;
};

// One thing doctor found.
struct DoctorFinding {
  // Stable identifiers: diverged, attention_logit_growth, output_logit_divergence, loss_spikes,
  // residual_growth, unigram_plateau, nonfinite_steps, guard_events, gradient_spikes,
  // second_moment_underestimate, update_spikes.
  std::string kind;
  // "problem": an instability to act on; "note": worth knowing, not an instability by itself.
  std::string severity;
  std::string title;                   // one line, with the headline numbers
  long first_step = 0, last_step = 0;  // the step range of the evidence (0: none)
  std::vector<std::string> evidence;
  std::vector<Remedy> remedies;
  std::vector<std::string> confirm;
  // The numbers behind the evidence. A problem finding has "statistic": {"name", "value",
  // "threshold", "onset_step", "bad_when"}: the measure that made doctor name it (a metrics.jsonl
  // field or a derived name, docs/doctor.md), which `doctor --confirm` measures again.
  nlohmann::json values = nlohmann::json::object();
};

// A check doctor could not perform: the evidence it needs is not in the run's records.
struct NotChecked {
  std::string check;               // its name ("attention-logit growth")
  std::vector<std::string> needs;  // the metrics.jsonl fields it needs
  std::string reason;              // a `missing` event's reason, else what is absent
  // The evidence was lost (a `missing` event names it, or records hold it as null), rather than
  // never asked for (diagnostics off, data unreadable): such a run is "not judged", never healthy.
  bool evidence_lost = false;
};

struct Diagnosis {
  std::string run_dir;
  bool has_config = false;
  Config config;           // the run's config.toml (defaults when it has none)
  long steps = 0;          // the step the run reached
  std::string end_reason;  // "done", "diverged", "interrupted", "" (no end event)
  std::string end_detail;
  std::optional<double> initial_loss, final_loss;  // step 1's loss; the end's train loss
  std::optional<double> unigram_entropy;           // of the training tokens, nats/token
  long diag_records = 0;                           // step lines with the diagnostics fields
  bool per_head = false;                           // ... with attn_max_logit_head
  std::vector<DoctorFinding> findings;
  // The checks performed (their evidence was there, or they found something), and those that
  // could not be, with why.
  std::vector<std::string> checked;
  std::vector<NotChecked> not_checked;
  // Signals that could not be checked (no diagnostics, no config...), and the setting that would
  // enable them ("diag.interval = 10"); empty when everything was checked.
  std::vector<std::string> unchecked;
  std::string enable;

  long problems() const;
  // The run reached its end: an end event "done" or "diverged" (or, for a run written before end
  // events, its last step line at train.steps).
  bool finished() const;
  // Whether some check could not be performed because its evidence was lost.
  bool evidence_lost() const;
  // No problem found in a finished run on which at least one check was performed and none lost
  // its evidence; an unfinished one is never given a clean bill.
  bool healthy() const {
    return problems() == 0 && finished() && !checked.empty() && !evidence_lost();
  }
  // One line: "healthy (no instability found)", the problems' kinds, or "not judged: ..." (no
  // check performed, or evidence lost); for an unfinished run first "interrupted at step 55 of
  // 150: judged on 55 steps" (or "... : not judged (...)").
  std::string verdict() const;
};

// Diagnoses RUN_DIR. Throws InputError when it is not a directory, FormatError when it has no
// metrics.jsonl, a malformed line in it (with the line number) or no step line, or a
// config.toml that does not parse.
Diagnosis diagnose_run(const std::string& run_dir);

// The analysis on records already read (tests): `unigram_entropy` none skips the plateau check.
// `run_dir` (optional) lets the divergence check look for the run's sweep (its parent folder).
Diagnosis diagnose_records(const std::vector<nlohmann::json>& records, const Config& cfg,
                           bool has_config, std::optional<double> unigram_entropy,
                           const std::string& run_dir = {});

// Entropy (nats) of the token frequencies of the run's training split: the data and tokenizer
// resolved as `normlab train` does (data.path, data.tokenizer or the run's copy, val_fraction).
double training_unigram_entropy(const Config& cfg, const std::string& run_dir);

nlohmann::json to_json(const Diagnosis& d);

}  // namespace normlab
