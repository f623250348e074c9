// normlab_bench train: timed training steps as the trainer runs them (zero_grad, forward with the
// loss and head gradient, backward, global-norm clipping and AdamW) on random token batches,
// after untimed warm-up steps: tokens/s, the step's time split, CPU time, every step's loss and
// gradient norm, and memory, as one JSON record.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "bench_internal.h"
#include "model/transformer.h"
#include "normlab/communicator.h"
#include "tensor/gemm_bf16.h"
#include "tensor/rng.h"
#include "tensor/threading.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "train/step.h"

namespace normlab::bench {

json run_train(const BenchConfig& bc, int steps, int warmup, int threads, GemmPrecision prec,
               const TrainKnobs& knobs) {
  const double rss0 = rss_mb();
  const int nthreads = set_thread_count(threads);
  const ModelConfig& mc = bc.model;
  const int B = bc.batch, Tn = mc.seq_len;
  Transformer<float> model(mc, B, Tn);
  model.set_matmul_precision(prec);
  if (knobs.head_precision) model.set_head_matmul_precision(*knobs.head_precision);
  model.init_params(knobs.init_seed);
  const OptimConfig& oc = knobs.optim;
  const auto opt = make_optimizer<float>(model.table(), oc, mc);
  opt->set_matmul_precision(prec);
  const auto comm = make_single_process_communicator();
  TrainStep train_step(model, *comm,
                       {.batch = B, .seq = Tn, .accum = 1, .z_loss = bc.z_loss,
                        .grad_clip = oc.grad_clip, .attn_maxima = opt->needs_attention_maxima()});
  Rng rng(knobs.data_seed);
  const long n = static_cast<long>(B) * Tn;
  std::vector<int> idx(n), tgt(n);
  const NextBatch next_batch = [&](int* i, int* t) {
    std::copy(idx.begin(), idx.end(), i);
    std::copy(tgt.begin(), tgt.end(), t);
  };
  std::vector<double> ms, cpu_ms, fwd_ms, bwd_ms, opt_ms, opt_cpu;
  double loss0 = 0, loss_last = 0;
  std::vector<double> losses;  // every step's, warm-up included
  std::vector<double> grad_norms;
  for (int s = 0; s < warmup + steps; ++s) {
    for (long i = 0; i < n; ++i) {
      idx[i] = static_cast<int>(rng.below(mc.vocab_size));
      tgt[i] = static_cast<int>(rng.below(mc.vocab_size));
    }
    // The trainer's step: zero grad, forward with the loss and the head gradient, backward,
    // gradient norm and clip factor (TrainStep), then AdamW with the clip applied.
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    const StepResult st = train_step.run(next_batch);
    const auto t2 = Clock::now();
    const double c2 = cpu_seconds();
    opt->update(model.params(), model.grads(), learning_rate(oc, s, warmup + steps), st.clip_scale,
                {st.attn_max_logit_head});
    const auto t3 = Clock::now();
    const double c3 = cpu_seconds();
    const double dt = std::chrono::duration<double, std::milli>(t3 - t0).count();
    if (s == 0) loss0 = st.loss.loss;
    loss_last = st.loss.loss;
    losses.push_back(st.loss.loss);
    grad_norms.push_back(st.grad_norm);
    if (!std::isfinite(st.loss.loss)) throw std::runtime_error("non-finite loss in the benchmark");
    if (s >= warmup) {
      ms.push_back(dt);
      cpu_ms.push_back((c3 - c0) * 1e3);
      opt_cpu.push_back((c3 - c2) * 1e3);
      fwd_ms.push_back(st.forward_s * 1e3);
      bwd_ms.push_back(st.backward_s * 1e3);
      opt_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
    }
  }
  const double step_ms = median(ms);
  const double tok_s = n / (step_ms / 1e3);
  json j;
  j["impl"] = "normlab";
  j["config"] = bc.name;
  j["precision"] = prec == GemmPrecision::bf16 ? "bf16" : "float32";
  if (prec == GemmPrecision::bf16) j["bf16_kernel"] = bf16_kernel_name(bf16_kernel());
  j["head_precision"] = model.head_matmul_precision() == GemmPrecision::bf16 ? "bf16" : "float32";
  j["lr"] = oc.lr;
  j["lr_warmup"] = oc.warmup_steps;
  j["init_seed"] = knobs.init_seed;
  j["data_seed"] = knobs.data_seed;
  j["description"] = bc.description;
  j["threads"] = nthreads;
  j["params"] = model.table().total();
  j["matmul_params"] = matmul_params(mc);
  j["tokens_per_step"] = n;
  j["flops_per_token"] = flops_per_token(mc);
  j["steps"] = steps;
  j["warmup"] = warmup;
  j["step_ms"] = ms;
  j["step_ms_median"] = step_ms;
  // CPU time of the process (all threads, user + system) per step: a check on the wall time when
  // other processes share the cores (spin-waiting counts here too).
  j["cpu_ms_median"] = median(cpu_ms);
  // Where the step goes: zero_grad + forward with the loss and the head's gradient; backward of
  // the body; clipping + AdamW.
  j["forward_ms_median"] = median(fwd_ms);
  j["backward_ms_median"] = median(bwd_ms);
  j["optimizer_ms_median"] = median(opt_ms);
  j["optimizer_cpu_ms_median"] = median(opt_cpu);
  j["tokens_per_s"] = tok_s;
  j["gflops"] = flops_per_token(mc) * tok_s / 1e9;
  j["loss_first"] = loss0;
  j["loss_last"] = loss_last;
  j["losses"] = losses;
  j["grad_norms"] = grad_norms;  // before clipping
  j["peak_rss_mb"] = peak_rss_mb();
  j["baseline_rss_mb"] = rss0;
  j["activation_mb"] = model.activation_elements() * 4.0 / (1 << 20);
  return j;
}

}  // namespace normlab::bench
