// Learning-rate schedule: linear warmup (never zero at step 0), then cosine, linear or constant
// decay to lr * min_lr_ratio.
#pragma once
#include "normlab/config.h"

namespace normlab {

// Learning rate for 0-based step s of a run of total_steps.
double learning_rate(const OptimConfig& o, long s, long total_steps);

}  // namespace normlab
