// μP, the maximal-update parametrization (Yang et al. 2022, "Tensor Programs V: Tuning Large
// Neural Networks via Zero-Shot Hyperparameter Transfer", Table 3 in the form with an output
// multiplier, which the `mup` package implements), for model.parametrization = mup.
//
// The rules, all relative to the base model (normlab::mup_base_model: the same model at
// d_model = model.mup_base_width), where every multiplier is 1 and the model is the standard one:
//   - width shapes: a dimension of a parameter that differs from the base is a width dimension
//     (mup's set_base_shapes). Its shape class (MupClass, mup's classification) follows from its
//     width dimensions and its role in the parameter table:
//       hidden (matrix-like): two width dimensions (q/k/v, attention output, MLP; the per-value
//         attention gate, and the per-head one when the heads grow with width);
//       readout (readout-like): a linear map whose fan-in grows with width and whose fan-out does
//         not: the LM head, and the per-head attention gate W_g (n_head, d_model) at a fixed
//         number of heads. mup refuses these as a plain nn.Linear and wants MuReadout;
//       vector-like: one width dimension otherwise (embeddings, norm gains, biases, per-channel
//         scales: fan-out grows, fan-in does not);
//       fixed: no width dimension;
//   - initialisation: matrix-like weights drawn with std (or Xavier bound) divided by
//     sqrt(fan_in / base fan_in); Xavier bounds computed from the base shape (mup.init); everything
//     else as in the base model;
//   - readout: logits = (mup_output_mult * base_width / d_model) * W_head h (mup's MuReadout and
//     MuSharedReadout: the same multiplier whether or not the head is tied to the embedding);
//     every other readout-like map the same with output_mult 1: the per-head gate's logits are
//     (1 / m_fan_in) u W_g^T (readout_like_multiplier); init and Adam-family lr as vector-like;
//   - attention: scores scaled by s0 * D0 / D instead of 1/sqrt(D), s0 = model.attn_scale or
//     1/sqrt(D0), D0 the base head size ("1/d attention": mup's Transformer example scales
//     scores by sqrt(attn_mult) / D, here with attn_mult = (s0 D0)^2; equal to the standard scale
//     at the base head size);
//   - learning rates, per optimizer (each optimizer's lr_multiplier reads these):
//       Adam family (adamw, stable_adamw, adam_atan2): matrix-like lr / (fan_in / base fan_in),
//       others unchanged, readout-like included (mup's MuAdam/MuAdamW);
//       muon, hidden matrices: unchanged with adjust_lr = original (its update, orthogonalised and
//       scaled by sqrt(max(1, out/in)), already has the width-independent spectral norm μP asks
//       for: Bernstein et al. 2023, "A Spectral Condition for Feature Learning"); divided by
//       sqrt(fan_in / base fan_in) with match_rms_adamw (whose step is the original's times
//       0.2 sqrt(fan_in)); Muon's AdamW group as the Adam family;
//       muon, readout-like hidden matrices (the per-head gate at fixed heads): the spectral
//       condition asks ||dW_eff|| ~ sqrt(fan_out / fan_in) ~ m^-1/2 of the map with its 1/m
//       multiplier, so ||dW|| ~ m^1/2: lr x sqrt(m_fan_in) with adjust_lr = original (update
//       scale sqrt(max(1, out/in)) = 1), x1 with match_rms_adamw (0.2 sqrt(max(out, in)) already
//       grows as sqrt(m));
//   - weight decay: the decay factor stays 1 - lr wd at the schedule's lr (MuAdamW's default,
//     decoupled_wd = False: wd multiplied by what divides lr).
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"

namespace normlab {

// μP's shape classes (see above), from the width shape and the role in the parameter table.
enum class MupClass { fixed, vector_like, hidden, readout };
std::string_view to_string(MupClass c);
MupClass mup_class(const ParamSpec& s);
// The multiplier on the output of a readout-like linear map other than the LM head (MuReadout,
// output_mult 1): 1 / m_fan_in; 1 for every other class and under the standard parametrization.
double readout_like_multiplier(const ParamSpec& s);

// Sets every spec's width shape against the base model's table and rescales the initialisation of
// matrix-like weights (model.parametrization = mup; the table is left as it is otherwise).
void apply_mup(ParamTable& table, const ModelConfig& cfg);

// The readout (LM head) multiplier: 1 under the standard parametrization.
double readout_multiplier(const ModelConfig& cfg);
// The attention-score scale (model.attn_scale, or 1/sqrt(D); μP's s0 D0 / D).
double attention_scale(const ModelConfig& cfg);

// `normlab info`'s lines on the parametrization of a model with this table (empty: standard).
std::vector<std::string> describe_mup(const ModelConfig& cfg, const ParamTable& table);

// Learning-rate multipliers of one parameter (1 under the standard parametrization).
double adam_lr_multiplier(const ParamSpec& s);
double muon_lr_multiplier(const ParamSpec& s, MuonAdjustLr adjust);

}  // namespace normlab
