// One training step and one evaluation, the two sequences everything that trains shares (the
// trainer, the gradflow study, the benchmark, the Python binding).
//
// train_step computes the gradient of one optimizer step over the global batch: advance the
// model's per-step state (Transformer::update_training_state: σReparam's power iteration, once per
// step, not per micro-batch); zero the gradients; for each of `accum` micro-batches draw (B, T) tokens, run the forward pass with the
// loss (its head gradient on the fly) and the backward pass; sum over ranks. The loss of every
// micro-batch is scaled by 1 / (accum * world), so the summed gradient is that of the mean loss
// over the global batch; then the global gradient norm and the clip factor it implies. It does not
// touch the parameters: whether and how to apply the gradient (AdamW, the guards) is the caller's.
#pragma once
#include <functional>
#include <span>
#include <vector>

#include "model/transformer.h"

namespace normlab {

class Communicator;
class EvalBatches;
class ExactEvalBatches;

// Fills idx and targets, each (B, T), with the next micro-batch.
using NextBatch = std::function<void(int* idx, int* targets)>;

struct StepShape {
  int batch = 0;        // B: rows per micro-batch on this rank
  int seq = 0;          // T
  int accum = 1;        // micro-batches per step
  double z_loss = 0;    // z-loss coefficient
  long bucket_size = 4194304;  // all-reduce bucket, elements
  bool deterministic = false;  // rank-ordered sums, micro-batches accumulated from zero in order
  double grad_clip = 0;        // global-norm clipping threshold (optim.grad_clip; 0 = off)
  bool attn_maxima = false;    // gather StepResult::attn_max_logit_head (QK-Clip)
};

// Means over the global batch (all micro-batches, all ranks).
struct StepLoss {
  double loss = 0;      // ce + z_loss
  double ce = 0;
  double z_loss = 0;
  double lse_mean = 0;  // mean log Z
};

struct StepResult {
  StepLoss loss;
  double grad_norm = 0;   // global L2 norm of the summed gradient, before clipping
  double clip_scale = 1;  // the clip factor, clip_scale(grad_clip, grad_norm): the optimizer
                          // applies it to the gradients as it reads them (train/optimizer.h)
  double forward_s = 0;   // wall seconds in zero-grad + forward (with the head gradient)
  double backward_s = 0;  // wall seconds in the body's backward
  double comm_s = 0;      // wall seconds in the all-reduce (0 with one rank)
  // With StepShape::attn_maxima: (L * H) the largest |pre-softmax attention logit| of each layer
  // and query head over every micro-batch of every rank (the optimizer's StepSignals); a view of
  // the TrainStep's own buffer, valid until its next run(). Empty otherwise.
  std::span<const double> attn_max_logit_head;
};

// Called after the all-reduce, before the gradient norm: may change the gradients and the loss
// (fault injection in tests).
using AfterBackward = std::function<void(std::span<float> grads, double& loss)>;

class TrainStep {
 public:
  TrainStep(Transformer<float>& model, Communicator& comm, StepShape shape);
  // With collect_stats, the model gathers its ForwardStats over the last micro-batch
  // (diagnostics).
  StepResult run(const NextBatch& next_batch, bool collect_stats = false,
                 const AfterBackward& after_backward = {});

 private:
  Transformer<float>& model_;
  Communicator& comm_;
  StepShape shape_;
  std::vector<int> idx_, tgt_;     // (B, T) tokens of the current micro-batch
  std::vector<float> grad_total_;  // deterministic accumulation of the micro-batches (P)
  std::vector<double> maxima_;     // (L * H) attention maxima of the step (StepShape::attn_maxima)
  std::vector<double> slots_;      // (world, L * H) their reduction over the ranks
};

// Mean cross-entropy of `model` over every batch of `batches` (no gradients), averaged over the
// ranks of `comm` when given (each rank evaluates its slice of every batch). `progress`, when
// given, is called after every batch with the targets scored so far and their total (this rank's).
using ScoredProgress = std::function<void(long done, long total)>;
double mean_loss(Transformer<float>& model, EvalBatches& batches, Communicator* comm = nullptr,
                 const ScoredProgress& progress = {});

// Mean cross-entropy of `model` over every target of `batches`, each scored once: the sum of
// nats over all blocks divided by num_targets() (one process; `normlab eval`'s exact mode).
double mean_loss(Transformer<float>& model, ExactEvalBatches& batches,
                 const ScoredProgress& progress = {});

}  // namespace normlab
