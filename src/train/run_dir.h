// The run directory of a training run, as the trainer opens it: which checkpoint a resumed run
// continues from and with which config, and what a run writes into RUN/ as it starts (config.toml,
// its copy of the tokenizer, fresh or continued metrics). Resuming from an older checkpoint rewinds
// the run: its later checkpoints go, and the metrics records after its step are dropped.
// Layout (docs/design.md): RUN/config.toml, RUN/metrics.jsonl, RUN/metrics.csv,
// RUN/tokenizer.json|model, RUN/checkpoints/step_N/, RUN/checkpoints/latest.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "io/metrics.h"
#include "normlab/config.h"
#include "normlab/trainer.h"

namespace normlab {

// The checkpoint folder `from` names, or the run's newest intact one (resume_point()). A named
// one must be one of run_dir's checkpoints (InputError), intact (DamagedCheckpointError) and, unless
// from.rewind, not older than an intact checkpoint of the run (InputError naming the checkpoints
// and the metrics records rewinding would delete).
std::string resume_checkpoint(const std::string& run_dir, const ResumeOptions& from);

// The config a resumed run continues with: `from.config`, which may differ from the checkpoint's
// only in resumable keys, or the run's saved config.
Config resumed_config(const std::string& run_dir, const std::string& ckpt,
                      const ResumeOptions& from);

// Refuses to start a new run in a directory that already holds a checkpoint.
void refuse_existing_run(const std::string& run_dir);

// What rank 0 writes through while the run trains.
struct OpenRun {
  std::unique_ptr<MetricsWriter> metrics;
  std::optional<RunEnd> previous_end;  // a resumed run's last end event (from its latest checkpoint)
};

// A new run (rank 0): creates the directory, copies the tokenizer into it when `tokenizer_file` is
// not empty (*tokenizer_file becomes the copy's path), writes config.toml and starts fresh metrics.
OpenRun start_run_dir(const std::string& run_dir, const Config& cfg, std::string* tokenizer_file);

// A resumed run (rank 0) at checkpoint `ckpt` of step `step`: rewinds the run when `ckpt` is not its
// latest (rewind_checkpoints: later intact checkpoints deleted, damaged ones moved aside), writes the (possibly changed) config as config.toml, and continues the metrics after
// `step` (the old end events are dropped).
OpenRun continue_run_dir(const std::string& run_dir, const std::string& ckpt, const Config& cfg,
                         long step);

// Whether the run directory holds a checkpoint to go back to.
bool has_checkpoint(const std::string& run_dir);

}  // namespace normlab
