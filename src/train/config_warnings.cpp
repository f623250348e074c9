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
  // Keys of one optimizer set while another trains: a typo of optim.name, or a sweep over them
  // that would measure nothing.
  const OptimConfig d;
  const OptimConfig& o = c.optim;
  const auto unused = [&](const char* key, bool changed, std::string_view used_by) {
    if (changed)
      out.push_back(fmt::format("optim.{} has no effect with optim.name = {} (it is {}'s)", key,
                                to_string(o.name), used_by));
  };
  if (o.name != OptimizerKind::muon) {
    unused("adamw_lr", o.adamw_lr != d.adamw_lr, "muon");
    unused("momentum", o.momentum != d.momentum, "muon");
    unused("nesterov", o.nesterov != d.nesterov, "muon");
    unused("ns_steps", o.ns_steps != d.ns_steps, "muon");
    unused("ns_a", o.ns_a != d.ns_a || o.ns_b != d.ns_b || o.ns_c != d.ns_c, "muon");
    unused("adjust_lr", o.adjust_lr != d.adjust_lr, "muon");
  }
  if (o.name != OptimizerKind::adam_atan2) {
    unused("atan2_a", o.atan2_a != d.atan2_a, "adam_atan2");
    unused("atan2_b", o.atan2_b != d.atan2_b, "adam_atan2");
  }
  if (o.qk_clip <= 0 && o.qk_clip_alpha != d.qk_clip_alpha)
    out.push_back(fmt::format("optim.qk_clip_alpha has no effect while optim.qk_clip = 0 (QK-Clip "
                              "is off)"));
  return out;
}

std::vector<std::string> config_warnings(const Config& c) {
  return config_warnings(c, available_cores());
}

}  // namespace normlab
