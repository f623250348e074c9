#include "train/optimizers/registry.h"

#include "train/optimizers/adafactor.h"
#include "train/optimizers/adam_atan2.h"
#include "train/optimizers/adamw.h"
#include "train/optimizers/muon.h"
#include "train/optimizers/soap.h"
#include "train/optimizers/stable_adamw.h"

namespace normlab {

namespace {

template <template <class> class O>
OptimizerRow row(OptimizerKind kind) {
  return {kind,
          [](const ParamTable& t, const OptimConfig& c, const ModelConfig& m) {
            return std::unique_ptr<Optimizer<float>>(std::make_unique<O<float>>(t, c, m));
          },
          [](const ParamTable& t, const OptimConfig& c, const ModelConfig& m) {
            return std::unique_ptr<Optimizer<double>>(std::make_unique<O<double>>(t, c, m));
          },
          [](const ParamTable& t, const OptimConfig& c) {
            // SOAP's state depends on its settings (optim.soap.max_precond_dim); the others' not.
            if constexpr (requires { O<float>::state_elements(t, c); })
              return O<float>::state_elements(t, c);
            else
              return O<float>::state_elements(t);
          },
          [](const ParamTable& t, const OptimConfig& c) { return O<float>::describe(t, c); }};
}

}  // namespace

std::span<const OptimizerRow> optimizer_registry() {
  static const OptimizerRow rows[] = {
      row<AdamW>(OptimizerKind::adamw),
      row<Muon>(OptimizerKind::muon),
      row<StableAdamW>(OptimizerKind::stable_adamw),
      row<AdamAtan2>(OptimizerKind::adam_atan2),
      row<Adafactor>(OptimizerKind::adafactor),
      row<Soap>(OptimizerKind::soap),
  };
  return rows;
}

}  // namespace normlab
