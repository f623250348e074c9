// Saving and loading checkpoints of the model and optimizer (the layout and the guarantees are in
// include/normlab/checkpoint.h; this is the part that needs the engine's types).
#pragma once
#include <string>
#include <vector>

#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "train/optimizer.h"

namespace normlab {

// Writes checkpoints/step_<step>/ atomically, moves `latest`, keeps the newest `keep` folders.
// Returns the folder written.
std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const Transformer<float>& model, const Optimizer<float>& opt,
                            const TrainingState& state, int keep);

// Whether `ckpt_dir` is the run's latest complete checkpoint.
bool is_latest_checkpoint(const std::string& run_dir, const std::string& ckpt_dir);

// Rewinds a run to its checkpoint `ckpt_dir`: moves `latest` to it, then deletes the intact
// checkpoint folders of later steps (renamed away first, as pruning does) and moves the damaged
// ones aside to step_N.damaged. Returns the folders deleted.
std::vector<std::string> rewind_checkpoints(const std::string& run_dir,
                                            const std::string& ckpt_dir);

// The intact checkpoint folders of steps after `ckpt_dir`'s, oldest first: what rewinding to it
// would delete.
std::vector<std::string> later_intact_checkpoints(const std::string& run_dir,
                                                  const std::string& ckpt_dir);

// Loads weights (and, when given, the optimizer's state by name and the training state) from a
// checkpoint folder. All-or-nothing: throws FormatError naming the tensor or field that does not
// match (an optimizer state the checkpoint does not hold is named with the optimizer that saved
// it), leaving the model and the optimizer as they were.
void load_checkpoint(const std::string& ckpt_dir, Transformer<float>& model, Optimizer<float>* opt,
                     TrainingState* state);

}  // namespace normlab
