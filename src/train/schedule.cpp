#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace normlab {

double learning_rate(const OptimConfig& o, long s, long total_steps) {
  if (s < o.warmup_steps) return o.lr * static_cast<double>(s + 1) / o.warmup_steps;
  const double lr_min = o.lr * o.min_lr_ratio;
  const double span = std::max<long>(1, total_steps - o.warmup_steps);
  const double prog = std::clamp((s - o.warmup_steps) / span, 0.0, 1.0);
  switch (o.schedule) {
    case ScheduleKind::cosine: return lr_min + (o.lr - lr_min) * 0.5 * (1.0 + std::cos(M_PI * prog));
    case ScheduleKind::linear: return o.lr - (o.lr - lr_min) * prog;
    case ScheduleKind::constant: return o.lr;
  }
  return o.lr;
}

}  // namespace normlab
