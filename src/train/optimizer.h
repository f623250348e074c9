// The optimizer interface over the parameter table. Each optimizer (src/train/optimizers/, one file
// each, one row of registry.cpp) implements `apply` and declares its state as named arenas
// (StateArena) whose entries carry their own names and shapes, so that the trainer, checkpoints,
// resume, rollback, MPI and the Python binding handle any of them without knowing which it is.
// QK-Clip (train/qk_clip.h) runs after any optimizer's step, from here.
//
// Gradient clipping is decided by the step that computes the gradient norm (train/step.h:
// StepResult::clip_scale, from clip_scale below); the optimizer receives that factor and applies
// it as it reads the gradients (they are left scaled, as in-place clipping leaves them).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/params.h"
#include "normlab/config.h"
#include "tensor/gemm_bf16.h"

namespace normlab {

class QkClip;
struct QkClipEvents;

// Global L2 norm of a gradient arena, summed tensor by tensor over the parameter table.
template <class T>
double gradient_norm(const ParamTable& table, std::span<const T> grads);

// Global-norm clipping as torch.nn.utils.clip_grad_norm_: the gradients are to be scaled by
// min(1, grad_clip / (grad_norm + 1e-6)); 1 when grad_clip <= 0 (off).
double clip_scale(double grad_clip, double grad_norm);

// One tensor of an optimizer's state: the parameter it belongs to, its name in checkpoints and in
// the Python binding, and its own shape (the parameter's unless its arena says otherwise:
// Adafactor's row and column factors of a matrix are vectors). Checkpoints, resume, rollback and
// normlab.Optimizer read a state tensor through these fields only.
struct StateEntry {
  const ParamSpec* param;           // the covered parameter
  std::string name;                 // prefix + parameter name: "adam.m.blocks.0.attn.wqkv.weight"
  std::vector<std::int64_t> shape;  // the entry's own shape
  long numel;                       // product of shape
  long offset;                      // into the arena's data, 16-element aligned
};

// The shape of the entry an arena keeps for a covered parameter; an empty function keeps the
// parameter's own shape.
using StateShape = std::function<std::vector<std::int64_t>(const ParamSpec&)>;

// One state tensor per covered trained parameter (never a buffer, ParamSpec::trained), all in one
// arena, in table order, every tensor 16-element aligned, saved in checkpoints under its entry's
// name and shape. An arena of parameter-shaped entries covering every parameter has the table's
// offsets.
template <class T>
struct StateArena {
  StateArena(std::string prefix, const ParamTable& table,
             const std::function<bool(const ParamSpec&)>& covers, const StateShape& shape = {});
  std::string prefix;
  std::vector<StateEntry> entries;  // the covered parameters' tensors, in table order
  std::vector<T> data;
  std::size_t size() const { return entries.size(); }
  const ParamSpec& spec(std::size_t i) const { return *entries[i].param; }
  T* at(std::size_t i) { return data.data() + entries[i].offset; }
  const T* at(std::size_t i) const { return data.data() + entries[i].offset; }
  // The size of such an arena, without allocating it.
  static long elements(const ParamTable& table, const std::function<bool(const ParamSpec&)>& covers,
                       const StateShape& shape = {});
};

// What the step measured that an optimizer step may use.
struct StepSignals {
  // (L * H) the largest |pre-softmax attention logit| of each layer and query head over the
  // step's global batch (Transformer's ForwardStats::attn_max_logit_head); empty when the step
  // did not gather them (needs_attention_maxima() false).
  std::span<const double> attn_max_logit_head;
};

template <class T>
class Optimizer {
 public:
  Optimizer(const ParamTable& table, const OptimConfig& cfg, const ModelConfig& model);
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  OptimizerKind kind() const { return cfg_.name; }
  // One step at learning rate lr (the schedule's value for optim.lr) on the gradients
  // grad_scale * grads, then QK-Clip when optim.qk_clip > 0, then the parameter table's
  // constraints (ParamSpec::unit_norm: nGPT's unit-norm rows and columns, restored after every
  // step whichever optimizer took it).
  void update(std::span<T> params, std::span<T> grads, double lr, double grad_scale = 1.0,
              const StepSignals& signals = {});
  // The state by name (checkpoints, Python), in a fixed order: whatever names and shapes its
  // entries have, nothing outside the optimizer needs to know them. Arenas live as long as the
  // optimizer; their sizes never change.
  virtual std::vector<StateArena<T>*> state() = 0;
  std::vector<const StateArena<T>*> state() const;
  long steps_taken() const { return t_; }
  void set_steps_taken(long t) { t_ = t; }
  // Whether update() needs StepSignals::attn_max_logit_head (QK-Clip on).
  bool needs_attention_maxima() const { return qk_clip_ != nullptr; }
  // QK-Clip's events of the last update (empty when off).
  const QkClipEvents* qk_clip_events() const;
  // For diagnostics, after an update: RMS(g^2 / max(v_hat, eps^2)) of each parameter (table
  // order), g the gradient as the update used it (clipped), v_hat the bias-corrected second moment
  // (Wortsman et al. 2023b: its spike precedes a loss spike); NaN for a parameter without a
  // second moment (Muon's matrices).
  virtual std::vector<double> second_moment_ratio(std::span<const T> grads) const;
  // Whether decoupled weight decay applies to a parameter: the table's decay flag, and
  // optim.decay_embeddings for the embedding group.
  bool decayed(const ParamSpec& s) const;
  // The factor on the learning rate of one parameter: μP's rule for this optimizer
  // (model/mup.h; the Adam family's by default), 1 under the standard parametrization. Weight
  // decay is divided by it, so that the decay factor stays 1 - lr wd (mup's MuAdamW).
  virtual double lr_multiplier(const ParamSpec& s) const;
  const ParamTable& table() const { return table_; }
  const OptimConfig& config() const { return cfg_; }
  // The precision of the optimizer's own matrix products (Muon's Newton-Schulz iteration), as
  // train.matmul_precision resolves; element-wise optimizers ignore it.
  void set_matmul_precision(GemmPrecision p) { mm_ = p; }

 protected:
  // The optimizer's own step; t (steps_taken) is already incremented.
  virtual void apply(std::span<T> params, std::span<T> grads, double lr, double grad_scale) = 0;
  const ParamTable& table_;
  OptimConfig cfg_;
  long t_ = 0;
  GemmPrecision mm_ = GemmPrecision::float32;

 private:
  std::unique_ptr<QkClip> qk_clip_;
};

// The per-parameter RMS(g^2 / max(v / bc2, eps^2)) of the parameters arena v covers, written into
// out (table order; others left as they are). second_moment_ratio's common part.
template <class T>
void second_moment_rms(const ParamTable& table, const StateArena<T>& v, double bc2, double eps,
                       std::span<const T> grads, std::vector<double>& out);

// The optimizer optim.name names, over `table` (a model of config `model`).
template <class T>
std::unique_ptr<Optimizer<T>> make_optimizer(const ParamTable& table, const OptimConfig& cfg,
                                             const ModelConfig& model);

// The number of values of state the optimizer optim.name keeps for a model with this table
// (memory estimates: AdamW 2P; Muon P for the hidden matrices and 2P for the rest).
long optimizer_state_elements(const ParamTable& table, const OptimConfig& cfg);

// One line for `normlab train`'s banner: what optim.name (and QK-Clip) will do on this table,
// e.g. "optimizer muon: Muon on 8 matrices (12 with q, k, v and gate/up apart), AdamW on 7
// tensors at lr 3e-3", and the table's constraints (nGPT's unit-norm matrices); empty for
// AdamW without QK-Clip or constraints (the default).
std::string describe_optimizer(const ParamTable& table, const OptimConfig& cfg);

extern template class Optimizer<float>;
extern template class Optimizer<double>;

}  // namespace normlab
