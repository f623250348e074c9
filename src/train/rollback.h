// PaLM's remedy for a loss spike (Chowdhery et al. 2022, section 5.1): back to the last good
// checkpoint, keeping the data position, so that the batches drawn since that checkpoint (the
// offending ones among them) are skipped. train.spike_policy = "rollback" (train/guard.h decides).
#pragma once
#include <optional>
#include <string>

#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/metrics.h"
#include "train/guard.h"
#include "train/optimizer.h"

namespace normlab {

class Rollbacks {
 public:
  explicit Rollbacks(int max_bad_steps) : max_bad_steps_(max_bad_steps) {}

  // Reloads the run's latest checkpoint (weights, optimizer state, guard window, training state)
  // but keeps the sampler where it is, and counts the rollback in state.extra["rollbacks"].
  // `step` is the step being rolled back, with its loss and gradient norm. Returns the event to
  // record.
  RollbackEvent roll_back(const std::string& run_dir, long step, double loss, double grad_norm,
                          Transformer<float>& model, Optimizer<float>& opt, SpikeGuard& guard,
                          const BatchSampler& sampler, TrainingState& state);

  // The stop reason when the run has now been bad for too long: `bad_run` consecutive bad steps,
  // or max_bad_steps rollbacks to one checkpoint (good steps between them or not: a spike that
  // comes back every time the run replays from that checkpoint would otherwise loop forever).
  std::optional<std::string> too_many(const RollbackEvent& ev, int bad_run) const;

 private:
  int max_bad_steps_;
  std::string last_ckpt_;  // the checkpoint of the last rollback, and how many in a row went to it
  int to_last_ckpt_ = 0;
};

}  // namespace normlab
