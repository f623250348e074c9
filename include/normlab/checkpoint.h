// Checkpoints: a run directory holds config.toml, metrics, and checkpoints/step_NNNNNNNN/ folders,
// each with model.safetensors (weights; "__metadata__" has "format": "pt" and the config) and
// state.safetensors (AdamW moments; the training state as JSON metadata). A checkpoint folder is
// written under a temporary name, flushed, and renamed into place; only then does the
// checkpoints/latest pointer move. A crash at any moment leaves the previous checkpoint loadable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"

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

// Resolves what the user passed to --checkpoint: a run directory (its latest checkpoint), or a
// checkpoint folder, or a model.safetensors file. Returns the checkpoint folder. Throws FormatError
// naming `path` when it does not exist, is another file, or is a directory without a checkpoint.
std::string resolve_checkpoint(const std::string& path);

// The config stored in a checkpoint's model.safetensors metadata.
Config checkpoint_config(const std::string& ckpt_dir);

// What `train --resume PATH` names: PATH is a run directory (its latest checkpoint) or one of the
// run's checkpoint folders, RUN/checkpoints/step_00000100. Throws FormatError otherwise.
struct ResumePoint {
  std::string run_dir;
  std::string checkpoint;  // the checkpoint folder
};
ResumePoint resume_point(const std::string& path);

// The config a run resumed from `p` continues with: the run's config.toml (the checkpoint's
// config when the run has none) with `overrides` ("section.key=value") applied. Throws
// ConfigError for a bad override and, by name, for every key that differs from the checkpoint's
// config and may not change on resume (check_resume_config in config_file.h).
Config resume_config(const ResumePoint& p, const std::vector<std::string>& overrides = {});

}  // namespace normlab
