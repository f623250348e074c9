// The spike guard: z-scores of the loss and of the gradient norm against the last `window`
// finite steps (in the manner of OLMo-core's skip-step AdamW). Its window is part of the
// training state so that a resumed run takes the same decisions.
#pragma once
#include <deque>

#include <nlohmann/json.hpp>

namespace normlab {

class SpikeGuard {
 public:
  SpikeGuard(int window, double threshold) : window_(window), threshold_(threshold) {}
  // True when the window is full and the loss or the gradient norm lies more than `threshold`
  // standard deviations above the window's mean.
  bool is_spike(double loss, double grad_norm) const;
  // Records a finite step (whether or not its update was applied).
  void record(double loss, double grad_norm);
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j);

 private:
  static double zscore(const std::deque<double>& w, double x);
  int window_;
  double threshold_;
  std::deque<double> loss_, grad_;
};

}  // namespace normlab
