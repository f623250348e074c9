#include "train/step.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "normlab/communicator.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "train/optimizer.h"

namespace normlab {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

TrainStep::TrainStep(Transformer<float>& model, Communicator& comm, StepShape shape)
    : model_(model), comm_(comm), shape_(shape) {
  const long n = static_cast<long>(shape.batch) * shape.seq;
  idx_.resize(n);
  tgt_.resize(n);
  if (shape.deterministic && shape.accum > 1) grad_total_.resize(model.params().size());
  if (shape.attn_maxima) {
    const long LH = static_cast<long>(model.config().n_layer) * model.config().n_head;
    maxima_.resize(LH);
    if (comm.world() > 1) slots_.resize(static_cast<std::size_t>(comm.world()) * LH);
  }
}

StepResult TrainStep::run(const NextBatch& next_batch, bool collect_stats,
                          const AfterBackward& after_backward) {
  const StepShape& sh = shape_;
  const int world = comm_.world();
  const double scale = 1.0 / (static_cast<double>(sh.accum) * world);
  const bool det_accum = !grad_total_.empty();
  StepResult r;
  auto t0 = Clock::now();
  model_.update_training_state();  // once per step, before its micro-batches (σReparam's u, v)
  model_.zero_grad();
  if (det_accum) std::fill(grad_total_.begin(), grad_total_.end(), 0.0f);
  double sums[4] = {0, 0, 0, 0};  // loss, ce, z_loss, log Z: scaled, summed, then reduced
  const long LH = static_cast<long>(maxima_.size());
  std::fill(maxima_.begin(), maxima_.end(), 0.0);
  model_.set_collect_attn_max(sh.attn_maxima);
  for (int a = 0; a < sh.accum; ++a) {
    next_batch(idx_.data(), tgt_.data());
    model_.set_collect_stats(collect_stats && a == sh.accum - 1);
    if (det_accum) model_.zero_grad();
    const LossStats st =
        model_.forward(idx_.data(), tgt_.data(), sh.batch, sh.seq, sh.z_loss, true, scale);
    r.forward_s += seconds_since(t0);
    t0 = Clock::now();
    model_.backward();
    r.backward_s += seconds_since(t0);
    t0 = Clock::now();
    if (det_accum) {
      // Each micro-batch's gradient from zero, added in order: the same sums, in the same order,
      // as the rank-ordered reduction of dist.deterministic.
      auto g = model_.grads();
      for (std::size_t i = 0; i < g.size(); ++i) grad_total_[i] += g[i];
    }
    if (sh.attn_maxima) {
      const auto& mh = model_.stats().attn_max_logit_head;
      for (long i = 0; i < LH; ++i)
        maxima_[i] = std::fmax(maxima_[i], mh[i]);
    }
    sums[0] += st.loss * scale;
    sums[1] += st.ce * scale;
    sums[2] += st.z_loss * scale;
    sums[3] += st.lse_mean * scale;
  }
  if (det_accum) std::copy(grad_total_.begin(), grad_total_.end(), model_.grads().begin());
  model_.set_collect_stats(false);
  model_.set_collect_attn_max(false);
  if (world > 1) {
    const auto c0 = Clock::now();
    comm_.allreduce_sum(model_.grads().data(), static_cast<long>(model_.grads().size()),
                        sh.bucket_size, sh.deterministic);
    comm_.allreduce_sum(sums, 4);
    if (sh.attn_maxima) {
      // The maximum over ranks through the sum: each rank fills its own slot of a (world, L * H)
      // table with zeros elsewhere, so the sum is exact, then the slots' maximum.
      std::fill(slots_.begin(), slots_.end(), 0.0);
      std::copy(maxima_.begin(), maxima_.end(), slots_.begin() + static_cast<long>(comm_.rank()) * LH);
      comm_.allreduce_sum(slots_.data(), static_cast<long>(slots_.size()));
      for (int w = 0; w < world; ++w)
        for (long i = 0; i < LH; ++i) maxima_[i] = std::fmax(maxima_[i], slots_[w * LH + i]);
    }
    r.comm_s = seconds_since(c0);
  }
  r.attn_max_logit_head = maxima_;
  r.loss = {sums[0], sums[1], sums[2], sums[3]};
  if (after_backward) after_backward(model_.grads(), r.loss.loss);
  r.grad_norm = gradient_norm(model_.table(), std::span<const float>(model_.grads()));
  r.clip_scale = clip_scale(sh.grad_clip, r.grad_norm);
  return r;
}

double mean_loss(Transformer<float>& model, EvalBatches& batches, Communicator* comm,
                 const ScoredProgress& progress) {
  const int B = batches.local_batch(), T = batches.seq_len();
  std::vector<int> idx(static_cast<long>(B) * T), tgt(idx.size());
  const long per_batch = static_cast<long>(B) * T;
  double sum = 0;
  for (int k = 0; k < batches.num_batches(); ++k) {
    batches.fill(k, idx.data(), tgt.data());
    sum += model.forward(idx.data(), tgt.data(), B, T, 0.0, false).ce;
    if (progress) progress((k + 1) * per_batch, batches.num_batches() * per_batch);
  }
  const int world = comm ? comm->world() : 1;
  if (comm) comm->allreduce_sum(&sum, 1);
  return sum / (static_cast<double>(batches.num_batches()) * world);
}

double mean_loss(Transformer<float>& model, ExactEvalBatches& batches,
                 const ScoredProgress& progress) {
  std::vector<int> idx(static_cast<long>(batches.max_rows()) * batches.seq_len()), tgt(idx.size());
  // Each block's mean times its rows * len is its sum of nats: a short last window or a block of
  // fewer than B rows weighs by the tokens it holds, not as a full batch.
  double sum = 0;
  long tokens = 0;
  EvalBlock b;
  batches.reset();
  while (batches.next(b, idx.data(), tgt.data())) {
    const long n = static_cast<long>(b.rows) * b.len;
    sum += model.forward(idx.data(), tgt.data(), b.rows, b.len, 0.0, false).ce * n;
    tokens += n;
    if (progress) progress(tokens, batches.num_targets());
  }
  NL_CHECK(tokens == batches.num_targets(), "exact eval scored {} of {} targets", tokens,
           batches.num_targets());
  return sum / static_cast<double>(tokens);
}

}  // namespace normlab
