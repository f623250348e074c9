// Diagnostics of a training step, with the stable names written to metrics.jsonl:
//   grad_norm_block[l], grad_norm_attn[l], grad_norm_mlp[l]    per-layer gradient norms
//   grad_norm_group{group}                                     per parameter group
//   resid_rms[k], resid_max[k]     residual stream at boundary k (0: embedding, 2l+1: after block
//                                  l's attention sublayer, 2l+2: after block l)
//   attn_max_logit[l], attn_entropy[l] (and attn_max_logit_head[l][h] on request)
//   log_z_mean, log_z_std, log_z_max, max_logit, max_logit_raw
//   update_ratio{group}            ||w_after - w_before|| / ||w_before|| of the step
//   update_rms{group}              RMS of w_after - w_before over the group's elements
//   rms_g2v{group}, rms_g2v_max, rms_g2v_max_tensor    the optimizer's RMS(g^2 / v_hat)
//   sigma_w{weight}, sigma_gamma{weight}  σReparam: sigma(W) and gamma per row block
// All derived from the parameter table, the gradients and the model's ForwardStats.
#pragma once
#include <span>

#include <nlohmann/json.hpp>

#include "model/transformer.h"

namespace normlab {

struct GradNorms {
  std::vector<double> block, attn, mlp;           // per layer
  std::map<std::string, double> group;            // per ParamGroup name
  // Parameters outside the blocks, by role: the embeddings; the LM head (untied) with nGPT's
  // logit scale s_z; the final norm's.
  double embedding = 0, head = 0, final_norm = 0;
};

// Gradient (or any arena's) L2 norms grouped by layer, sublayer and group via the table.
GradNorms grad_norms(const ParamTable& table, int n_layer, std::span<const float> arena);

// The diagnostics JSON fields above. `before` holds the parameters before the optimizer step (or
// is empty: no update ratios).
nlohmann::json diagnostics_json(const Transformer<float>& model, std::span<const float> grads,
                                std::span<const float> before, bool per_head);

// rms_g2v{group} (RMS over the group's elements), rms_g2v_max and rms_g2v_max_tensor from the
// per-parameter RMS(g^2 / v_hat) in table order (Optimizer::second_moment_ratio; NaN: no second
// moment, left out). Empty when no parameter has one.
nlohmann::json second_moment_json(const ParamTable& table, std::span<const double> per_param);

}  // namespace normlab
