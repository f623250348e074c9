// The optimizers normlab trains with: one row each, the only place that maps optim.name to an
// implementation (train/optimizer.h: make_optimizer, optimizer_state_elements).
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "train/optimizer.h"

namespace normlab {

struct OptimizerRow {
  OptimizerKind kind;
  std::function<std::unique_ptr<Optimizer<float>>(const ParamTable&, const OptimConfig&,
                                                  const ModelConfig&)>
      make_f;
  std::function<std::unique_ptr<Optimizer<double>>(const ParamTable&, const OptimConfig&,
                                                   const ModelConfig&)>
      make_d;
  // values of state, without allocating (for the optimizer's settings: SOAP's depends on them)
  std::function<long(const ParamTable&, const OptimConfig&)> state_elements;
  // describe_optimizer's text for this optimizer, before QK-Clip and the table's constraints
  // (empty: nothing worth a line, AdamW's default).
  std::function<std::string(const ParamTable&, const OptimConfig&)> describe;
};

std::span<const OptimizerRow> optimizer_registry();

}  // namespace normlab
