#include "train/guard.h"

#include <cmath>
#include <numeric>

namespace normlab {

double SpikeGuard::zscore(const std::deque<double>& w, double x) {
  const double mean = std::accumulate(w.begin(), w.end(), 0.0) / w.size();
  double var = 0;
  for (double v : w) var += (v - mean) * (v - mean);
  const double sd = std::sqrt(var / w.size());
  return sd > 0 ? (x - mean) / sd : 0.0;
}

bool SpikeGuard::is_spike(double loss, double grad_norm) const {
  if (static_cast<int>(loss_.size()) < window_) return false;
  return zscore(loss_, loss) > threshold_ || zscore(grad_, grad_norm) > threshold_;
}

StepDecision SpikeGuard::decide(double loss, double grad_norm, SpikePolicy policy,
                                bool can_rollback) {
  StepDecision d;
  d.finite = std::isfinite(loss) && std::isfinite(grad_norm);
  d.spike = d.finite && is_spike(loss, grad_norm);
  if (!d.finite)
    d.action = StepAction::skip;
  else if (d.spike && policy == SpikePolicy::skip)
    d.action = StepAction::skip;
  else if (d.spike && policy == SpikePolicy::rollback) {
    d.action = can_rollback ? StepAction::rollback : StepAction::skip;
    d.rollback_unavailable = !can_rollback;
  }
  bad_run_ = d.action == StepAction::update ? 0 : bad_run_ + 1;
  d.bad_run = bad_run_;
  if (d.finite && d.action != StepAction::rollback) record(loss, grad_norm);
  return d;
}

void SpikeGuard::record(double loss, double grad_norm) {
  loss_.push_back(loss);
  grad_.push_back(grad_norm);
  while (static_cast<int>(loss_.size()) > window_) {
    loss_.pop_front();
    grad_.pop_front();
  }
}

nlohmann::json SpikeGuard::to_json() const {
  return {{"loss", std::vector<double>(loss_.begin(), loss_.end())},
          {"grad_norm", std::vector<double>(grad_.begin(), grad_.end())},
          {"bad_run", bad_run_}};
}

void SpikeGuard::from_json(const nlohmann::json& j, bool with_bad_run) {
  if (with_bad_run) bad_run_ = j.value("bad_run", 0);
  const auto l = j.value("loss", std::vector<double>{}), g = j.value("grad_norm", std::vector<double>{});
  loss_.assign(l.begin(), l.end());
  grad_.assign(g.begin(), g.end());
  // A resumed run may have shortened the window (train.spike_window): keep its newest steps.
  while (static_cast<int>(loss_.size()) > window_) loss_.pop_front();
  while (static_cast<int>(grad_.size()) > window_) grad_.pop_front();
}

}  // namespace normlab
