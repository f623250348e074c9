// Warnings about valid but suspicious settings (see config_warnings.h).
#include "train/config_warnings.h"

#include <fmt/format.h>

#include "tensor/threading.h"

namespace normlab {

std::vector<std::string> config_warnings(const Config& c, int cores) {
  std::vector<std::string> out;
  if (c.optim.warmup_steps > c.train.steps)
    out.push_back(fmt::format(
        "optim.warmup_steps = {} is greater than train.steps = {}: the warmup never ends, the "
        "learning rate peaks at {:.3g} instead of optim.lr = {:.3g}",
        c.optim.warmup_steps, c.train.steps,
        c.optim.lr * static_cast<double>(c.train.steps) / c.optim.warmup_steps, c.optim.lr));
  if (c.train.threads > cores)
    out.push_back(fmt::format(
        "train.threads = {} is more than the {} cores available to this process: the threads "
        "will share cores, which slows training down",
        c.train.threads, cores));
  return out;
}

std::vector<std::string> config_warnings(const Config& c) {
  return config_warnings(c, available_cores());
}

}  // namespace normlab
