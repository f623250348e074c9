// Checkpoints: a run directory holds config.toml, metrics, and checkpoints/step_NNNNNNNN/ folders,
// each with model.safetensors (weights; "__metadata__" has "format": "pt" and the config) and
// state.safetensors (AdamW moments; the training state as JSON metadata). A checkpoint folder is
// written under a temporary name, flushed, and renamed into place; only then does the
// checkpoints/latest pointer move. A crash at any moment leaves the previous checkpoint loadable.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"
#include "normlab/errors.h"

namespace normlab {

// Everything besides weights and moments that an exact resume needs.
struct TrainingState {
  long step = 0;             // optimizer steps completed
  long tokens_seen = 0;
  long skipped_steps = 0;    // updates skipped by the guards
  std::uint64_t sampler_rng = 0;
  long sampler_draws = 0;
  nlohmann::json extra = nlohmann::json::object();  // guard windows and the like
};

nlohmann::json to_json(const TrainingState& s);
TrainingState training_state_from_json(const nlohmann::json& j);

// The folder `latest` points to. Throws FormatError when the run has no complete checkpoint.
std::string latest_checkpoint(const std::string& run_dir);

// What makes the checkpoint folder `ckpt_dir` unusable, judged from the sizes and headers of its
// files without reading the tensors (a safetensors file must be 8 + header length + the largest
// data offset bytes long): "model.safetensors is truncated (expected 5128 bytes, found 2564)",
// "state.safetensors is missing", or the reader's message for a header that is none; nullopt
// when intact. `with_state`: state.safetensors counts too (resuming needs it; eval and generate read
// the weights only).
std::optional<std::string> checkpoint_damage(const std::string& ckpt_dir, bool with_state = true);

// The checkpoint folders of a run, RUN/checkpoints/step_N (complete or not; not the .tmp and
// .damaged ones), oldest first.
std::vector<std::string> run_checkpoints(const std::string& run_dir);
// The step of a checkpoint folder named step_NNNNNNNN (any path to it); -1 for any other name
// (step_12.tmp, step_x, latest).
long checkpoint_step(const std::string& folder);

// A checkpoint folder that cannot be used. what(): "[checkpoint] checkpoint RUN/checkpoints/
// step_00000030 is damaged: model.safetensors is truncated (expected 5128 bytes, found 2564)", then
// a line with the run's intact checkpoints (or that it has none).
struct DamagedCheckpointError : FormatError {
  std::string checkpoint;           // the damaged folder
  std::string damage;               // what checkpoint_damage() says
  std::vector<std::string> intact;  // the run's intact checkpoint folders, newest first
  DamagedCheckpointError(std::string ckpt, std::string what, std::vector<std::string> ok);
};

// Resolves what the user passed to --checkpoint: a run directory (its latest checkpoint), or a
// checkpoint folder, or a model.safetensors file. Returns the checkpoint folder. Throws FormatError
// naming `path` when it does not exist, is another file, or is a directory without a checkpoint,
// and DamagedCheckpointError when its model.safetensors is damaged.
std::string resolve_checkpoint(const std::string& path);

// The config stored in a checkpoint's model.safetensors metadata.
Config checkpoint_config(const std::string& ckpt_dir);

// What `train --resume PATH` names: PATH is a run directory or one of the run's checkpoint
// folders, RUN/checkpoints/step_00000100. A run directory resumes from its newest intact
// checkpoint: the one `latest` names or, when that is damaged, the newest older one intact (the
// damaged ones passed over are listed). A folder named explicitly is never substituted: a damaged
// one throws DamagedCheckpointError, a missing one FormatError listing the run's checkpoints. Throws
// FormatError when PATH is neither, or the run has no intact checkpoint.
struct ResumePoint {
  std::string run_dir;
  std::string checkpoint;  // the checkpoint folder
  struct PassedOver {
    std::string checkpoint, damage;
  };
  std::vector<PassedOver> passed_over;  // newer damaged checkpoints, newest first
};
ResumePoint resume_point(const std::string& path);

// The config a run resumed from `p` continues with: the run's config.toml (the checkpoint's
// config when the run has none) with `overrides` ("section.key=value") applied. Throws
// ConfigError for a bad override and, by name, for every key that differs from the checkpoint's
// config and may not change on resume (check_resume_config in config_file.h).
Config resume_config(const ResumePoint& p, const std::vector<std::string>& overrides = {});

}  // namespace normlab
