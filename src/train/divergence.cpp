#include "train/divergence.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "io/metrics.h"

namespace normlab {

DivergenceRule::DivergenceRule(long total_steps)
    : total_(total_steps),
      span_(std::max(kMinSpan, static_cast<long>(std::ceil(kSpanFraction * total_steps)))),
      initial_(std::nan("")),
      ema_(std::nan("")) {}

std::optional<std::string> DivergenceRule::observe(long step, double loss, bool skipped) {
  if (skipped) return std::nullopt;  // the guards count skipped steps (train.max_bad_steps)
  if (!std::isfinite(loss))
    return fmt::format("non-finite loss at step {} (not skipped by the guards)", step);
  if (step == 1 && std::isnan(initial_)) initial_ = loss;
  const double a = 1.0 - std::exp2(-1.0 / kHalfLife);
  ema_ = std::isnan(ema_) ? loss : ema_ + a * (loss - ema_);
  above_ = std::isfinite(initial_) && ema_ > initial_ ? above_ + 1 : 0;
  if (above_ >= span_)
    return fmt::format("smoothed loss {:.4f} above the initial loss {:.4f} for {} steps (to step {})",
                       ema_, initial_, above_, step);
  return std::nullopt;
}

std::optional<std::string> DivergenceRule::judge_end(std::optional<double> val_loss,
                                                     std::optional<double> train_loss) const {
  const char* which = val_loss ? "val loss" : "train loss";
  const std::optional<double> fl = val_loss ? val_loss : train_loss;
  if (!fl) return std::nullopt;  // nothing to judge by
  if (!std::isfinite(*fl)) return fmt::format("final {} is not finite", which);
  if (!std::isfinite(initial_)) return std::nullopt;
  if (total_ < kMinSpan) {
    if (train_loss && *train_loss > kBlowUpFactor * initial_)
      return fmt::format("final train loss {:.4g} is more than {:g} times the initial loss {:.4f} "
                         "(a run of fewer than {} steps is judged by its train loss)",
                         *train_loss, kBlowUpFactor, initial_, kMinSpan);
    return std::nullopt;
  }
  if (!(*fl < initial_))
    return fmt::format("final {} {:.4f} is not below the initial loss {:.4f}", which, *fl, initial_);
  return std::nullopt;
}

std::optional<std::string> DivergenceRule::judge_end(const TrainResult& r) const {
  return judge_end(r.val_loss, r.train_loss_steps > 0 ? std::optional<double>(r.train_loss)
                                                      : std::nullopt);
}

std::string DivergenceRule::describe() {
  return fmt::format(
      "A run is diverged when a step's loss is non-finite and not skipped, when the trainer stops "
      "it for train.max_bad_steps consecutive bad steps (or rollbacks), when its smoothed training "
      "loss (EMA, half-life {:g} steps) stays above the initial loss (step 1) for max({}, {:g}% of "
      "train.steps) steps (early stop), or when its final loss (val loss at the end; train loss "
      "without evaluation) is not below the initial loss (a run of fewer than {} steps: when its "
      "final train loss is more than {:g} times the initial loss).",
      kHalfLife, kMinSpan, 100 * kSpanFraction, kMinSpan, kBlowUpFactor);
}

nlohmann::json DivergenceRule::to_json() const {
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"initial", num(initial_)}, {"smoothed", num(ema_)}, {"above", above_}};
}

void DivergenceRule::from_json(const nlohmann::json& j) {
  const auto num = [&](const char* k) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : NAN;
  };
  initial_ = num("initial");
  ema_ = num("smoothed");
  above_ = j.value("above", 0L);
}

TrainHooks with_divergence_rule(TrainHooks hooks, const Trainer& trainer,
                                const std::string& run_dir) {
  auto rule = std::make_shared<DivergenceRule>(trainer.config().train.steps);
  // A resumed run continues the rule where the checkpoint saved it (initial loss, smoothed loss,
  // steps above); from a checkpoint written without it, the rule replays the run's logged
  // records up to the checkpoint (exact when every step was logged).
  const nlohmann::json& saved = trainer.resumed_hook_state();
  if (saved.is_object() && saved.contains("divergence")) {
    rule->from_json(saved["divergence"]);
  } else if (trainer.step() > 0) {
    for (const auto& r : read_metrics(run_dir))
      if (!r.contains(metric::event) && r.contains(metric::step) &&
          r.value(metric::step, 0L) <= trainer.step())
        rule->observe(step_record_from_json(r));
  }
  auto others = hooks.save_state;
  hooks.save_state = [rule, others] {
    nlohmann::json j = others ? others() : nlohmann::json::object();
    j["divergence"] = rule->to_json();
    return j;
  };
  hooks.check_divergence = [rule](const StepRecord& r) { return rule->observe(r); };
  hooks.judge_end = [rule](const TrainResult& r) { return rule->judge_end(r); };
  return hooks;
}

std::string divergence_reason(std::string_view why) {
  constexpr std::string_view prefix = "diverged: ";
  if (why.starts_with(prefix)) why.remove_prefix(prefix.size());
  return std::string(why);
}

}  // namespace normlab
