#include "train/rollback.h"

#include <fmt/format.h>

#include "train/checkpoint.h"

namespace normlab {

RollbackEvent Rollbacks::roll_back(const std::string& run_dir, long step, double loss,
                                   double grad_norm, Transformer<float>& model, Optimizer<float>& opt,
                                   SpikeGuard& guard, const BatchSampler& sampler,
                                   TrainingState& state) {
  RollbackEvent ev;
  ev.step = step;
  ev.checkpoint = latest_checkpoint(run_dir);
  const int rollbacks = state.extra.value("rollbacks", 0) + 1;
  TrainingState st;
  load_checkpoint(ev.checkpoint, model, &opt, &st);
  guard.from_json(st.extra.value("guard", nlohmann::json::object()), false);
  const SamplerState now = sampler.state();
  state = st;
  state.sampler_rng = now.rng_state;
  state.sampler_draws = static_cast<long>(now.batches_drawn);
  state.extra["rollbacks"] = rollbacks;
  ev.to_step = state.step;
  ev.loss = loss;
  ev.grad_norm = grad_norm;
  ev.rollbacks_total = rollbacks;
  to_last_ckpt_ = ev.checkpoint == last_ckpt_ ? to_last_ckpt_ + 1 : 1;
  last_ckpt_ = ev.checkpoint;
  return ev;
}

std::optional<std::string> Rollbacks::too_many(const RollbackEvent& ev, int bad_run) const {
  if (bad_run >= max_bad_steps_)
    return fmt::format("diverged: {} consecutive bad steps (last at step {}); last good checkpoint: {}",
                       bad_run, ev.step, ev.checkpoint);
  if (to_last_ckpt_ >= max_bad_steps_)
    return fmt::format("diverged: {} rollbacks to the same checkpoint (last at step {}); last good "
                       "checkpoint: {}", to_last_ckpt_, ev.step, ev.checkpoint);
  return std::nullopt;
}

}  // namespace normlab
