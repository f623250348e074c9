// An optimizer over a Model's parameters, on its own: the optimizer optim.name names (any of the
// registry, src/train/optimizers/; with QK-Clip when optim.qk_clip > 0), stepped with gradients
// the caller gives, its state readable by name. What a notebook needs to step normlab's optimizer
// against another implementation (the Python binding's normlab.Optimizer); training itself goes
// through the Trainer, which holds the same optimizer.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "normlab/config.h"
#include "normlab/model.h"

namespace normlab {

class ModelOptimizer {
 public:
  // The optimizer of cfg.optim over `model`'s parameters (cfg.model must be the model's config;
  // train.matmul_precision sets the precision of Muon's products). The model must outlive it.
  // Throws ConfigError for an invalid cfg or one whose model section is not the model's.
  ModelOptimizer(const Config& cfg, Model& model);
  ModelOptimizer(ModelOptimizer&&) noexcept;
  ModelOptimizer& operator=(ModelOptimizer&&) noexcept;
  ~ModelOptimizer();

  // One step at learning rate lr on the model's gradient arena (Model::gradients(): what
  // loss_and_grads left, or what the caller wrote into those views), scaled by grad_scale (the
  // clip factor). attn_max_logit_head: (n_layer * n_head) the step's largest |attention logit|
  // per layer and query head, required with QK-Clip (InputError when missing or mis-sized).
  void step(double lr, double grad_scale = 1.0, std::span<const double> attn_max_logit_head = {});
  // Every state tensor ("adam.m.blocks.0.attn.wqkv.weight", "muon.momentum.*", ...), under the
  // name and with the shape the optimizer gives it (its parameter's for the Adam family and Muon;
  // Adafactor's row and column factors of a matrix are vectors); decayed and group are its
  // parameter's; views into the optimizer's memory, valid as long as it.
  std::vector<ParameterView> state();
  long steps_taken() const;
  std::string name() const;  // optim.name
  // The factor on the schedule's learning rate of every parameter (table order): μP's rule for
  // this optimizer (model/mup.h), 1 under the standard parametrization.
  std::vector<std::pair<std::string, double>> lr_multipliers() const;
  // QK-Clip of the last step: query heads clipped and the largest logit before (0, 0 when off).
  int qk_clip_heads() const;
  double qk_clip_max_logit() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab
