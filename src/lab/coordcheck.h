// The coordinate check (Yang et al. 2022, "Tensor Programs V", sec. 7 and appendix; the `mup`
// package's get_coord_data): train the same model at several widths for a few steps on the same
// batches and record the size (RMS over tokens and channels) of its activations at every step. Under
// a parametrization that is right in width the curves of activation size against width are flat;
// under the standard parametrization with Adam they grow with width after the first update.
//
// Widths scale d_model, d_ff and the query and key/value widths in proportion to the config's:
// with model.head_dim set, heads keep that size and their number grows; without it, the n_head
// heads grow wider. The learning rate is optim.lr from the first step (no warmup or decay), as in
// mup's coordinate checks; optimizer, clipping and the rest come from the config.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"

namespace normlab {

struct CoordcheckSettings {
  std::vector<int> widths;                         // d_model of each model (run increasing, once each)
  std::vector<Parametrization> parametrizations;   // each run at every width
  int steps = 5;   // updates; activations are recorded before each and after the last (steps + 1)
  int seeds = 3;   // initialisations averaged over (train.seed, + 1, ...), on the same batches
};

// The activations measured, in this order: the embedding output, the attention and MLP branch
// outputs (before any N_out; RMS over every layer together), the residual stream entering the final
// norm, the logits (after the readout multiplier, before the final soft-cap): their RMS; and the
// attention scores' size, as the largest |pre-softmax score| of each layer, averaged over layers
// (the one measure that is not an RMS: the attention kernel keeps no sum of squares). Models with
// more sites add theirs after these (coordcheck_activations(model)).
inline const std::vector<std::string>& coordcheck_activations() {
  static const std::vector<std::string> names = {"embedding", "attn_out", "mlp_out", "residual",
                                                 "logits", "attn_max_logit"};
  return names;
}
// The activations of this model: the six above, then with model.attn_gate "attn_gate_logit", the
// RMS of the gate's pre-activation (its logits after μP's multiplier, before the sigmoid; over
// every layer together).
std::vector<std::string> coordcheck_activations(const ModelConfig& m);

// The verdict's threshold: an activation whose slope at the last step exceeds this grows with
// width (a slope of 0.25 is a factor 1.41 per 4x width).
inline constexpr double kCoordcheckGrowthSlope = 0.25;

struct CoordcheckCurve {
  Parametrization parametrization;
  int width = 0;
  // rms[a][t]: activation a (coordcheck_activations order) at step t (0 = initialisation), the
  // mean over seeds of its RMS on the step's batch.
  std::vector<std::vector<double>> rms;
  std::vector<double> loss;  // mean over seeds, per step
};

struct CoordcheckResult {
  CoordcheckSettings settings;
  std::vector<std::string> activations;  // the names of rms[a], coordcheck_activations(model)
  std::vector<CoordcheckCurve> curves;  // parametrization-major, widths increasing
  // The least-squares slope of log2(RMS) on log2(width) for activation a at step t among the
  // curves of parametrization p: 0 flat, 1 proportional to width.
  double slope(Parametrization p, std::size_t a, int t) const;
};

// The model config at width w (see above); throws ConfigError when a width does not scale to a
// whole number of heads or units.
Config coordcheck_config(const Config& base, int width);

CoordcheckResult run_coordcheck(const Config& base, const CoordcheckSettings& s,
                                const std::function<void(const CoordcheckCurve&)>& on_curve = {});

nlohmann::json coordcheck_json(const Config& base, const CoordcheckResult& r);
CoordcheckResult coordcheck_from_json(const nlohmann::json& j);

// Markdown: per parametrization and activation, the RMS at each width at the last step and the
// slopes at the first update and the last step.
std::string coordcheck_table(const CoordcheckResult& r);

// One line per parametrization: the activations whose slope at the last step exceeds
// kCoordcheckGrowthSlope ("grow with width"), or that none does ("flat").
std::vector<std::string> coordcheck_verdicts(const CoordcheckResult& r);

}  // namespace normlab
