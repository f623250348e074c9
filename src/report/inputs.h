// What `normlab report` reads: run, sweep and gradflow directories, loaded into plain data.
//
// A directory's kind follows from the files in it:
//   run       config.toml and/or metrics.jsonl (what `normlab train` writes)
//   sweep     sweep.json: the grid, one entry per run (each run's own directory is a run
//             directory, relative to the sweep) and the learning-rate sensitivity per variant
//   gradflow  gradflow.json: per-layer gradient norms and hidden-state RMS at initialization
//   coordcheck  coordcheck.json: activation sizes against width (`normlab coordcheck`)
//   group     none of these, but subdirectories that are run directories (`normlab compare --out`)
// Missing values (JSON null: a non-finite number) become NaN. Problems that leave part of an input
// unusable (a config.toml that no longer parses, a torn last line) are kept as notes for the page;
// a directory of no known kind or a malformed JSON file is a FormatError.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/coordcheck.h"
#include "normlab/config.h"

namespace normlab::report {

struct RunInput {
  std::string dir;                        // the run directory
  std::string name;                       // directory name, or the sweep's name for the run
  std::optional<Config> config;           // from config.toml, when it parses
  std::vector<nlohmann::json> metrics;    // metrics.jsonl records, in order
  std::string status;                     // done, diverged, interrupted, failed, incomplete, or empty
  std::string sweep;                      // the sweep directory it belongs to, if any
};

struct SweepRun {
  std::string name, dir;                  // dir: resolved against the sweep directory
  nlohmann::json overrides;               // {"optim.lr": 0.001 or "0.001", "model.placement": "post"}
  std::string status;                     // done, diverged or failed
  std::string message;                    // why it stopped, when the sweep says
  double initial_loss = 0, final_loss = 0, final_val_loss = 0, max_attn_logit = 0;  // NaN = null
};

struct SensitivityRow {
  nlohmann::json variant;                 // every grid key except the learning rate
  std::string label;
  double sensitivity = 0, best_loss = 0;  // NaN = null
  std::vector<double> lrs, final_losses;  // same length; NaN = no final loss (diverged)
  // A sweep with several seeds: final_losses is the mean over the seeds, and these the lowest and
  // highest final loss at each lr (same length as lrs); empty for one seed.
  std::vector<double> final_loss_min, final_loss_max;
};

struct SweepInput {
  std::string dir, name;
  std::string lr_key = "optim.lr";
  nlohmann::json grid;                    // key -> list of values
  std::vector<SweepRun> runs;
  std::vector<SensitivityRow> sensitivity;
};

struct GradflowResult {
  std::string placement, init, label;
  int n_layer = 0;
  std::vector<double> grad_norm_layer, grad_norm_attn, grad_norm_mlp;  // (L)
  std::vector<double> hidden_rms;                                      // (L+1): embedding, each block
};

struct GradflowInput {
  std::string dir;
  nlohmann::json settings;
  std::vector<GradflowResult> results;
};

struct CoordcheckInput {
  std::string dir;
  CoordcheckResult result;
};

struct ReportInputs {
  std::vector<RunInput> runs;             // lone runs and the runs of every sweep
  std::vector<SweepInput> sweeps;
  std::vector<GradflowInput> gradflows;
  std::vector<CoordcheckInput> coordchecks;
  std::vector<std::string> notes;         // what could only be read in part, one line each
};

// Reads every directory; throws FormatError for one that is of no known kind or malformed.
ReportInputs load_inputs(const std::vector<std::string>& dirs);

// The value at `key` as a double: NaN when missing, null or not a number.
double number_or_nan(const nlohmann::json& j, const char* key);

// A number, or a string that is one ("0.001", as sweeps write override values); NaN otherwise.
double as_double(const nlohmann::json& v);

// Whether two override values are the same: numerically when both are numbers (0.001 == "1e-3"),
// else as text.
bool same_value(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace normlab::report
