#include "normlab/trainer.h"

#include <omp.h>

#include <chrono>
#include <deque>
#include <numeric>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "diag/diagnostics.h"
#include "dist/communicator.h"
#include "io/metrics.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "tensor/threading.h"
#include "train/guard.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace fs = std::filesystem;

namespace normlab {

TokenCorpus load_corpus(const DataConfig& d) {
  if (d.path.empty()) return TokenCorpus::embedded();
  if (fs::is_regular_file(d.path)) {
    std::ifstream f(d.path, std::ios::binary);
    char magic[8] = {};
    f.read(magic, 8);
    if (f.gcount() == 8 && std::string(magic, 8) == "NLTOKENS") return TokenCorpus::from_token_file(d.path);
  }
  return TokenCorpus::from_text_path(d.path);
}

struct Trainer::Impl {
  Communicator& comm;
  Config cfg;
  std::string run_dir;
  TokenCorpus corpus;
  CorpusSplit split;
  Transformer<float> model;
  AdamW<float> opt;
  BatchSampler sampler;
  TrainingState state;
  std::vector<int> idx, tgt;
  std::vector<float> before;  // parameters before the step, on diagnostic steps only
  std::vector<float> grad_total;  // deterministic gradient accumulation (dist.deterministic)
  std::unique_ptr<MetricsWriter> metrics;
  SpikeGuard guard;

  Impl(const Config& c, const std::string& dir, bool resume)
      : comm(world_communicator()),
        cfg(resume ? checkpoint_config(latest_checkpoint(dir)) : c),
        run_dir(dir),
        corpus(load_corpus(cfg.data)),
        split(corpus.split(cfg.data.val_fraction, cfg.model.seq_len)),
        model(cfg.model, cfg.train.batch_size, cfg.model.seq_len),
        opt(model.table(), cfg.optim),
        // train.batch_size rows per rank: every rank takes its slice of one global draw.
        sampler(split.train, cfg.train.batch_size * comm.world(), cfg.model.seq_len,
                sampler_seed(cfg.train), comm.rank(), comm.world()),
        guard(cfg.train.spike_window, cfg.train.spike_threshold) {
    if (corpus.vocab_size() > cfg.model.vocab_size)
      throw InputError(fmt::format("corpus {} has vocabulary {} but model.vocab_size = {}",
                                   corpus.name(), corpus.vocab_size(), cfg.model.vocab_size));
    set_thread_count(cfg.train.threads);
    model.set_matmul_precision(cfg.train.matmul_precision == MatmulPrecision::bf16
                                   ? GemmPrecision::bf16
                                   : GemmPrecision::float32);
    const long n = static_cast<long>(cfg.train.batch_size) * cfg.model.seq_len;
    idx.resize(n);
    tgt.resize(n);
    if (cfg.diag.interval > 0) before.resize(model.params().size());
    if (cfg.dist.deterministic && cfg.train.grad_accum > 1) grad_total.resize(model.params().size());
    if (resume) {
      const std::string ckpt = latest_checkpoint(dir);
      load_checkpoint(ckpt, model, &opt, &state);
      sampler.restore({state.sampler_rng, static_cast<std::uint64_t>(state.sampler_draws)});
      guard.from_json(state.extra.value("guard", nlohmann::json::object()));
      if (comm.is_root()) metrics = std::make_unique<MetricsWriter>(dir, state.step);
    } else {
      if (fs::exists(fs::path(dir) / "checkpoints" / "latest"))
        throw InputError(fmt::format("run directory {} already holds a checkpoint: use --resume {} "
                                     "to continue it, or another --out", dir, dir));
      model.init_params(cfg.train.seed);  // identical on every rank (same seed)
      if (comm.is_root()) {
        fs::create_directories(dir);
        std::ofstream(fs::path(dir) / "config.toml") << dump_config_toml(cfg);
        // A fresh run starts fresh metrics.
        fs::remove(fs::path(dir) / "metrics.jsonl");
        fs::remove(fs::path(dir) / "metrics.csv");
        metrics = std::make_unique<MetricsWriter>(dir);
      }
    }
    comm.barrier();
  }

  // Only rank 0 writes metrics.
  void write_metrics(const nlohmann::json& j) {
    if (metrics) metrics->write(j);
  }

  void checkpoint() {
    const SamplerState s = sampler.state();
    state.sampler_rng = s.rng_state;
    state.sampler_draws = static_cast<long>(s.batches_drawn);
    state.extra["guard"] = guard.to_json();
    if (comm.is_root()) save_checkpoint(run_dir, cfg, model, opt, state, cfg.train.keep_checkpoints);
    comm.barrier();  // nobody reads a checkpoint before it is complete
  }

  bool has_checkpoint() const {
    return fs::exists(fs::path(run_dir) / "checkpoints" / "latest");
  }

  // Reloads the latest checkpoint's weights, moments and state but keeps the sampler where it
  // is. Returns the checkpoint folder.
  std::string rollback() {
    const std::string ckpt = latest_checkpoint(run_dir);
    const int rollbacks = state.extra.value("rollbacks", 0) + 1;
    TrainingState st;
    load_checkpoint(ckpt, model, &opt, &st);
    guard.from_json(st.extra.value("guard", nlohmann::json::object()));
    const SamplerState now = sampler.state();
    state = st;
    state.sampler_rng = now.rng_state;
    state.sampler_draws = static_cast<long>(now.batches_drawn);
    state.extra["rollbacks"] = rollbacks;
    return ckpt;
  }

  double evaluate() {
    const int B = cfg.train.batch_size, T = cfg.model.seq_len;
    EvalBatches ev(split.validation, B * comm.world(), T, std::max(1, cfg.train.eval_batches),
                   comm.rank(), comm.world());
    double sum = 0;
    for (int k = 0; k < ev.num_batches(); ++k) {
      ev.fill(k, idx.data(), tgt.data());
      sum += model.forward(idx.data(), tgt.data(), B, T, 0.0, false).ce;
    }
    comm.allreduce_sum(&sum, 1);
    return sum / (static_cast<double>(ev.num_batches()) * comm.world());
  }
};

Trainer::Trainer(const Config& cfg, const std::string& run_dir, bool resume)
    : impl_(std::make_unique<Impl>(cfg, run_dir, resume)) {}
Trainer::~Trainer() = default;
const Config& Trainer::config() const { return impl_->cfg; }
long Trainer::step() const { return impl_->state.step; }
double Trainer::evaluate() { return impl_->evaluate(); }
std::span<const float> Trainer::params() const { return impl_->model.params(); }
std::span<const float> Trainer::adam_m() const { return impl_->opt.m(); }
std::span<const float> Trainer::adam_v() const { return impl_->opt.v(); }
const TrainingState& Trainer::state() const { return impl_->state; }

TrainResult Trainer::run(const TrainHooks& hooks) {
  Impl& I = *impl_;
  const Config& cfg = I.cfg;
  const int B = cfg.train.batch_size, T = cfg.model.seq_len, accum = cfg.train.grad_accum;
  const long total = cfg.train.steps;
  using clock = std::chrono::steady_clock;
  const auto t_start = clock::now();
  auto t_window = t_start;
  long tokens_window = 0;
  double loss_window = 0;
  int n_window = 0, bad_run = 0, steps_window = 0;
  double comm_s_window = 0;  // time in gradient all-reduce since the last log
  TrainResult res;
  while (I.state.step < total) {
    // Every rank must agree to stop: a signal on any of them stops all.
    double stop = hooks.stop_requested && hooks.stop_requested() ? 1.0 : 0.0;
    I.comm.allreduce_sum(&stop, 1);
    if (stop > 0) {
      I.checkpoint();
      res.stop_reason = "interrupted";
      break;
    }
    const bool diag_step = cfg.diag.interval > 0 &&
                           (I.state.step == 0 || (I.state.step + 1) % cfg.diag.interval == 0);
    // Gradients are scaled by 1 / (accum * world) in the loss, so that summing the micro-batches
    // and the ranks gives the mean over the global batch.
    const int world = I.comm.world();
    const double scale = 1.0 / (static_cast<double>(accum) * world);
    const bool det_accum = !I.grad_total.empty();
    I.model.zero_grad();
    if (det_accum) std::fill(I.grad_total.begin(), I.grad_total.end(), 0.0f);
    double stats[4] = {0, 0, 0, 0};  // loss, ce, z_loss, log Z: summed, then reduced
    for (int a = 0; a < accum; ++a) {
      I.sampler.next(I.idx.data(), I.tgt.data());
      I.model.set_collect_stats(diag_step && a == accum - 1);
      if (det_accum) I.model.zero_grad();
      const LossStats st = I.model.forward(I.idx.data(), I.tgt.data(), B, T, cfg.train.z_loss,
                                           true, scale);
      I.model.backward();
      if (det_accum) {
        // Each micro-batch's gradient from zero, added in order: the same sums, in the same
        // order, as the rank-ordered reduction of dist.deterministic.
        auto g = I.model.grads();
        for (std::size_t i = 0; i < g.size(); ++i) I.grad_total[i] += g[i];
      }
      stats[0] += st.loss * scale;
      stats[1] += st.ce * scale;
      stats[2] += st.z_loss * scale;
      stats[3] += st.lse_mean * scale;
    }
    if (det_accum) std::copy(I.grad_total.begin(), I.grad_total.end(), I.model.grads().begin());
    I.model.set_collect_stats(false);
    if (world > 1) {
      const auto c0 = clock::now();
      I.comm.allreduce_sum(I.model.grads().data(), static_cast<long>(I.model.grads().size()),
                           cfg.dist.bucket_size, cfg.dist.deterministic);
      I.comm.allreduce_sum(stats, 4);
      comm_s_window += std::chrono::duration<double>(clock::now() - c0).count();
    }
    ++steps_window;
    LossStats sum;
    sum.loss = stats[0];
    sum.ce = stats[1];
    sum.z_loss = stats[2];
    sum.lse_mean = stats[3];
    if (hooks.inject) hooks.inject(I.state.step, I.model.grads(), sum.loss);
    const double lr = learning_rate(cfg.optim, I.state.step, total);
    const double gnorm = I.opt.grad_norm(I.model.grads());

    // Guards. Non-finite: always skipped. Spike: by policy.
    const bool finite = std::isfinite(sum.loss) && std::isfinite(gnorm);
    const bool spike = finite && I.guard.is_spike(sum.loss, gnorm);
    enum class Action { update, skip, rollback } act = Action::update;
    if (!finite)
      act = Action::skip;
    else if (spike && cfg.train.spike_policy == SpikePolicy::skip)
      act = Action::skip;
    else if (spike && cfg.train.spike_policy == SpikePolicy::rollback)
      act = I.has_checkpoint() ? Action::rollback : Action::skip;
    bad_run = act == Action::update ? 0 : bad_run + 1;

    if (act == Action::rollback) {
      // PaLM's remedy: back to the last good checkpoint, keeping the data position, so the
      // batches drawn since that checkpoint (the offending ones among them) are skipped.
      const long from = I.state.step + 1;
      const std::string ckpt = I.rollback();
      nlohmann::json ev = {{"step", from}, {"event", "rollback"}, {"to_step", I.state.step},
                           {"checkpoint", ckpt}, {"loss", sum.loss}, {"grad_norm", gnorm},
                           {"rollbacks_total", I.state.extra.value("rollbacks", 0)}};
      I.write_metrics(ev);
      if (hooks.on_event && I.comm.is_root()) hooks.on_event(ev);
      if (bad_run >= cfg.train.max_bad_steps) {
        res.diverged = true;
        res.stop_reason = fmt::format("diverged: {} consecutive bad steps (last at step {}); last "
                                      "good checkpoint: {}", bad_run, from, ckpt);
        break;
      }
      continue;
    }
    if (diag_step) std::copy(I.model.params().begin(), I.model.params().end(), I.before.begin());
    // Every finite step enters the guard's window, skipped or not: a lasting shift of the loss
    // level becomes the new normal after a few steps instead of freezing training (a window of
    // accepted steps only would reject every step after a level shift, forever).
    if (finite) I.guard.record(sum.loss, gnorm);
    if (act == Action::update) {
      I.opt.step(I.model.params(), I.model.grads(), lr, gnorm);
    } else {
      ++I.state.skipped_steps;  // no parameter or moment is touched
    }
    ++I.state.step;
    I.state.tokens_seen += static_cast<long>(B) * T * accum * world;
    tokens_window += static_cast<long>(B) * T * accum * world;
    if (finite) {
      loss_window += sum.loss;
      ++n_window;
    }
    const long s = I.state.step;
    const bool last = s == total;
    StepRecord rec;
    rec.step = s;
    rec.loss = sum.loss;
    rec.skipped = act == Action::skip;
    if (diag_step) {
      rec.diag = diagnostics_json(I.model, I.model.grads(),
                                  act == Action::update ? std::span<const float>(I.before)
                                                        : std::span<const float>(),
                                  cfg.diag.per_head);
      rec.diag["spike"] = spike;
      rec.diag["nonfinite"] = !finite;
    }
    if (cfg.train.eval_interval > 0 && (s % cfg.train.eval_interval == 0 || last))
      rec.val_loss = I.evaluate();
    if (s == 1 || last || (cfg.train.log_interval > 0 && s % cfg.train.log_interval == 0) ||
        rec.val_loss || diag_step || act != Action::update || spike) {
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - t_window).count();
      rec.total_steps = total;
      rec.tokens = I.state.tokens_seen;
      rec.ce = sum.ce;
      rec.z_loss = sum.z_loss;
      rec.lse_mean = sum.lse_mean;
      rec.lr = lr;
      rec.grad_norm = gnorm;
      rec.tokens_per_s = dt > 0 ? tokens_window / dt : 0;
      rec.elapsed_s = std::chrono::duration<double>(now - t_start).count();
      auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
      nlohmann::json j = {{"step", rec.step},           {"tokens", rec.tokens},
                          {"loss", num(rec.loss)},      {"ce", num(rec.ce)},
                          {"z_loss", num(rec.z_loss)},  {"log_z_mean", num(rec.lse_mean)},
                          {"lr", rec.lr},               {"grad_norm", num(rec.grad_norm)},
                          {"tokens_per_s", rec.tokens_per_s}, {"skipped", rec.skipped},
                          {"spike", spike},             {"nonfinite", !finite},
                          {"skipped_total", I.state.skipped_steps}};
      if (rec.val_loss) j["val_loss"] = *rec.val_loss;
      if (world > 1) j["comm_ms_per_step"] = 1e3 * comm_s_window / std::max(1, steps_window);
      if (!rec.diag.is_null()) j.update(rec.diag);
      I.write_metrics(j);
      if (hooks.on_log && I.comm.is_root()) hooks.on_log(rec);
      res.final_loss = n_window ? loss_window / n_window : rec.loss;
      res.tokens_per_s = rec.tokens_per_s;
      if (rec.val_loss) res.val_loss = rec.val_loss;
      t_window = now;
      comm_s_window = 0;
      steps_window = 0;
      tokens_window = 0;
      loss_window = 0;
      n_window = 0;
    }
    if (hooks.check_divergence) {
      if (auto why = hooks.check_divergence(rec)) {
        res.diverged = true;
        res.stop_reason = *why;
        res.final_loss = rec.loss;
        break;
      }
    }
    if (bad_run >= cfg.train.max_bad_steps) {
      res.diverged = true;
      res.stop_reason = fmt::format(
          "diverged: {} consecutive skipped steps (non-finite or spiking loss/gradient), last at "
          "step {}; last good checkpoint: {}", bad_run, s,
          I.has_checkpoint() ? latest_checkpoint(I.run_dir) : std::string("none"));
      break;
    }
    if (last || (cfg.train.checkpoint_interval > 0 && s % cfg.train.checkpoint_interval == 0))
      I.checkpoint();
  }
  res.steps = I.state.step;
  res.wall_s = std::chrono::duration<double>(clock::now() - t_start).count();
  return res;
}

}  // namespace normlab
