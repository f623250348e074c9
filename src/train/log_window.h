// What the trainer accumulates between two logged records (the rates of a metrics line), and
// the ring of recent losses that gives a run's train loss (the mean of its last kTrainLossSteps
// updated steps; docs/metrics.md).
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "normlab/metrics.h"

namespace normlab {

// The log window: what happened since the last logged record.
struct LogWindow {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  long tokens = 0;
  int steps = 0;  // steps computed, rolled back ones included
  double comm_s = 0;
};

// The losses of the last kTrainLossSteps updated steps (a ring), for the train loss. Part of the
// training state (state.extra["recent_losses"]): a resumed run's train loss is the straight run's.
struct RecentLosses {
  double loss[kTrainLossSteps] = {};
  long n = 0;  // pushed so far
  void push(double x) { loss[n++ % kTrainLossSteps] = x; }
  long count() const { return std::min(n, kTrainLossSteps); }
  double mean() const {
    double sum = 0;
    for (long i = 0; i < count(); ++i) sum += loss[i];
    return count() ? sum / count() : std::nan("");
  }
  nlohmann::json to_json() const {
    return {{"n", n}, {"loss", std::vector<double>(loss, loss + count())}};
  }
  // A checkpoint written before the ring was saved has none: the ring starts empty.
  void from_json(const nlohmann::json& j) {
    const auto l = j.value("loss", std::vector<double>{});
    n = j.value("n", 0L);
    if (static_cast<long>(l.size()) != count()) n = 0;  // not a ring this one wrote: start empty
    std::copy(l.begin(), l.begin() + count(), loss);
  }
};

}  // namespace normlab
