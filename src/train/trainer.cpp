#include "normlab/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "diag/diagnostics.h"
#include "io/atomic_file.h"
#include "normlab/communicator.h"
#include "io/metrics.h"
#include "model/memory.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "tensor/threading.h"
#include "interop/weights.h"
#include "train/checkpoint.h"
#include "train/guard.h"
#include "train/run_tokenizer.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "train/step.h"

namespace fs = std::filesystem;

namespace normlab {

struct Trainer::Impl {
  Communicator& comm;
  std::string resume_ckpt;  // the checkpoint a resumed run continues from (empty for a new run)
  Config cfg;
  std::string run_dir;
  RunTokenizer tokenizer;  // data.tokenizer as resolved (train/run_tokenizer.h)
  TokenCorpus corpus;
  CorpusSplit split;
  Transformer<float> model;
  AdamW<float> opt;
  BatchSampler sampler;
  TrainStep train_step;
  TrainingState state;
  std::vector<float> before;  // (P) parameters before the step, on diagnostic steps only
  std::unique_ptr<MetricsWriter> metrics;
  SpikeGuard guard;
  std::string last_rollback_ckpt;  // the checkpoint of the last rollback, and how many in a row
  int rollbacks_to_ckpt = 0;       // went back to it
  std::optional<RunEnd> previous_end;  // a resumed run's last end event (rank 0)
  // The run's clock: seconds of earlier processes of this run (from the checkpoint) plus this
  // process's since it was ready to train. Written as time_s and saved in state.extra["time_s"].
  double time_before_s = 0;
  std::chrono::steady_clock::time_point clock_start;
  std::optional<InitFromReport> init_report;  // a new run started from train.init_from

  Impl(Communicator& cm, const Config& c, const std::string& dir, bool resume,
       const ResumeOptions& from)
      : comm(cm),
        resume_ckpt(resume ? resume_checkpoint(dir, from) : std::string()),
        cfg(resume ? resumed_config(dir, resume_ckpt, from) : c),
        run_dir(dir),
        // A resumed run uses its own copy of the tokenizer; a new one copies it in below.
        tokenizer(resolve_tokenizer(cfg, resume ? dir : std::string())),
        corpus((check_vocab(cfg.model, tokenizer),
                TokenCorpus::from_path(cfg.data.path, *tokenizer.tok))),
        split(corpus.split(cfg.data.val_fraction, cfg.model.seq_len)),
        // Refuses, before anything is allocated, a run that cannot fit in memory (model/memory.h).
        model(require_memory_fits(cfg), cfg.train.batch_size, cfg.model.seq_len),
        opt(model.table(), cfg.optim),
        // train.batch_size rows per rank: every rank takes its slice of one global draw.
        sampler(split.train, cfg.train.batch_size * comm.world(), cfg.model.seq_len,
                sampler_seed(cfg.train), comm.rank(), comm.world()),
        train_step(model, comm,
                   {cfg.train.batch_size, cfg.model.seq_len, cfg.train.grad_accum,
                    cfg.train.z_loss, cfg.dist.bucket_size, cfg.dist.deterministic}),
        guard(cfg.train.spike_window, cfg.train.spike_threshold) {
    if (corpus.vocab_size() > cfg.model.vocab_size)
      throw InputError(fmt::format("corpus {} has vocabulary {} but model.vocab_size = {}",
                                   corpus.name(), corpus.vocab_size(), cfg.model.vocab_size));
    set_thread_count(cfg.train.threads);
    model.set_matmul_precision(resolve_matmul_precision(cfg.train.matmul_precision) ==
                                       MatmulPrecision::bf16
                                   ? GemmPrecision::bf16
                                   : GemmPrecision::float32);
    if (cfg.diag.interval > 0) before.resize(model.params().size());
    if (resume) {
      load_checkpoint(resume_ckpt, model, &opt, &state);
      if (state.step > cfg.train.steps)
        throw ConfigError({fmt::format("train.steps = {} is below step {} of the checkpoint {}",
                                       cfg.train.steps, state.step, resume_ckpt)});
      sampler.restore({state.sampler_rng, static_cast<std::uint64_t>(state.sampler_draws)});
      guard.from_json(state.extra.value("guard", nlohmann::json::object()));
      time_before_s = state.extra.value(metric::time_s, 0.0);
      if (comm.is_root()) {
        // An older checkpoint rewinds the run: its later checkpoints go, and MetricsWriter drops
        // the records after its step. The config (changed or not) becomes the run's config.toml.
        const bool latest = is_latest_checkpoint(dir, resume_ckpt);
        if (!latest) rewind_checkpoints(dir, resume_ckpt);
        write_file_atomic((fs::path(dir) / "config.toml").string(), dump_config_toml(cfg), "[run]");
        if (const auto e = read_run_end(dir); latest && e && e->from_event) previous_end = e;
        metrics = std::make_unique<MetricsWriter>(dir, state.step);  // drops the old end events
      }
    } else {
      if (fs::exists(fs::path(dir) / "checkpoints" / "latest"))
        throw InputError(fmt::format("run directory {} already holds a checkpoint: use --resume {} "
                                     "to continue it, or another --out", dir, dir));
      model.init_params(cfg.train.seed);  // identical on every rank (same seed)
      if (!cfg.train.init_from.empty()) {
        const std::string src = resolve_checkpoint(cfg.train.init_from);
        const WeightMatch w = load_matching_weights(
            model, SafetensorsFile::open((fs::path(src) / "model.safetensors").string()));
        init_report = InitFromReport{src, w.copied, w.initialized, w.dropped};
      }
      if (comm.is_root()) {
        fs::create_directories(dir);
        if (!tokenizer.file.empty()) tokenizer.file = save_run_tokenizer(dir, tokenizer.file);
        std::ofstream(fs::path(dir) / "config.toml") << dump_config_toml(cfg);
        // A fresh run starts fresh metrics.
        fs::remove(fs::path(dir) / "metrics.jsonl");
        fs::remove(fs::path(dir) / "metrics.csv");
        metrics = std::make_unique<MetricsWriter>(dir);
      }
    }
    comm.barrier();
    clock_start = std::chrono::steady_clock::now();
  }

  double time_s(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const {
    return time_before_s + std::chrono::duration<double>(now - clock_start).count();
  }

  // The checkpoint folder `from` names (it must be one of run_dir's), or the latest.
  static std::string resume_checkpoint(const std::string& dir, const ResumeOptions& from) {
    if (from.checkpoint.empty()) return latest_checkpoint(dir);
    fs::path ck = fs::path(from.checkpoint).lexically_normal();
    if (!ck.has_filename()) ck = ck.parent_path();
    const fs::path root = fs::path(dir) / "checkpoints";
    if (!fs::exists(ck / "model.safetensors") || !fs::exists(ck / "state.safetensors") ||
        !fs::exists(root) || !fs::equivalent(fs::absolute(ck).parent_path(), root))
      throw InputError(
          fmt::format("{} is not a complete checkpoint of the run {}", from.checkpoint, dir));
    return ck.string();
  }

  // The config a resumed run continues with: `from.config`, which may differ from the
  // checkpoint's only in resumable keys, or the run's saved config.
  static Config resumed_config(const std::string& dir, const std::string& ckpt,
                               const ResumeOptions& from) {
    if (!from.config) return resume_config({dir, ckpt});
    check_resume_config(checkpoint_config(ckpt), *from.config);
    return *from.config;
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
    state.extra[metric::time_s] = time_s();
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

  // The log window: what happened since the last logged record.
  struct Window {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    long tokens = 0;
    int steps = 0;        // steps computed, rolled back ones included
    double comm_s = 0;
  };

  long tokens_per_step() const {
    return static_cast<long>(cfg.train.batch_size) * cfg.model.seq_len * cfg.train.grad_accum *
           comm.world();
  }

  bool diagnostics_due() const {
    return cfg.diag.interval > 0 && (state.step == 0 || (state.step + 1) % cfg.diag.interval == 0);
  }

  bool log_due(const StepRecord& r, bool diag_step, const StepDecision& d) const {
    const long s = r.step;
    return s == 1 || s == cfg.train.steps ||
           (cfg.train.log_interval > 0 && s % cfg.train.log_interval == 0) || r.val_loss ||
           diag_step || d.action != StepAction::update || d.spike;
  }

  bool checkpoint_due(long s) const {
    return s == cfg.train.steps ||
           (cfg.train.checkpoint_interval > 0 && s % cfg.train.checkpoint_interval == 0);
  }

  // PaLM's remedy for a spike: back to the last good checkpoint, keeping the data position, so
  // the batches drawn since that checkpoint (the offending ones among them) are skipped. Returns
  // the stop reason when the run has now been bad for too long.
  std::optional<std::string> roll_back(const StepResult& sr, const StepDecision& d,
                                       const TrainHooks& hooks) {
    RollbackEvent ev;
    ev.step = state.step + 1;
    ev.checkpoint = rollback();
    ev.to_step = state.step;
    ev.loss = sr.loss.loss;
    ev.grad_norm = sr.grad_norm;
    ev.rollbacks_total = state.extra.value("rollbacks", 0);
    const nlohmann::json j = to_json(ev);
    write_metrics(j);
    if (hooks.on_event && comm.is_root()) hooks.on_event(j);
    // Rollbacks to one checkpoint count together, good steps between them or not: a spike that
    // comes back every time the run replays from that checkpoint would otherwise loop forever.
    rollbacks_to_ckpt = ev.checkpoint == last_rollback_ckpt ? rollbacks_to_ckpt + 1 : 1;
    last_rollback_ckpt = ev.checkpoint;
    if (d.bad_run >= cfg.train.max_bad_steps)
      return fmt::format("diverged: {} consecutive bad steps (last at step {}); last good checkpoint: {}",
                         d.bad_run, ev.step, ev.checkpoint);
    if (rollbacks_to_ckpt >= cfg.train.max_bad_steps)
      return fmt::format("diverged: {} rollbacks to the same checkpoint (last at step {}); last good "
                         "checkpoint: {}", rollbacks_to_ckpt, ev.step, ev.checkpoint);
    return std::nullopt;
  }

  // Applies (or skips) the step's update and advances the training state. Returns the step's
  // record with everything but the log window's rates.
  StepRecord advance(const StepResult& sr, const StepDecision& d, double lr, bool diag_step) {
    if (diag_step) std::copy(model.params().begin(), model.params().end(), before.begin());
    const bool update = d.action == StepAction::update;
    if (update)
      opt.step(model.params(), model.grads(), lr, sr.grad_norm);
    else
      ++state.skipped_steps;  // no parameter or moment is touched
    ++state.step;
    state.tokens_seen += tokens_per_step();
    StepRecord r;
    r.step = state.step;
    r.total_steps = cfg.train.steps;
    r.tokens = state.tokens_seen;
    r.loss = sr.loss.loss;
    r.ce = sr.loss.ce;
    r.z_loss = sr.loss.z_loss;
    r.lse_mean = sr.loss.lse_mean;
    r.lr = lr;
    r.grad_norm = sr.grad_norm;
    r.skipped = d.action == StepAction::skip;
    r.spike = d.spike;
    r.nonfinite = !d.finite;
    r.skipped_total = state.skipped_steps;
    r.rollback_unavailable = d.rollback_unavailable;
    if (diag_step) {
      r.diag = diagnostics_json(model, model.grads(),
                                update ? std::span<const float>(before) : std::span<const float>(),
                                cfg.diag.per_head);
      r.diag[metric::spike] = d.spike;
      r.diag[metric::nonfinite] = !d.finite;
    }
    if (cfg.train.eval_interval > 0 &&
        (r.step % cfg.train.eval_interval == 0 || r.step == cfg.train.steps))
      r.val_loss = evaluate();
    return r;
  }

  // Writes the record with the window's rates, tells the hook, and starts a new window.
  void log(StepRecord& r, Window& w, std::chrono::steady_clock::time_point t_start,
           const TrainHooks& hooks, TrainResult& res) {
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - w.start).count();
    r.tokens_per_s = dt > 0 ? w.tokens / dt : 0;
    r.elapsed_s = std::chrono::duration<double>(now - t_start).count();
    r.time_s = time_s(now);
    if (comm.world() > 1) r.comm_ms_per_step = 1e3 * w.comm_s / std::max(1, w.steps);
    write_metrics(to_json(r));
    if (hooks.on_log && comm.is_root()) hooks.on_log(r);
    if (r.val_loss) res.val_loss = r.val_loss;
    w = Window{now};
  }

  // The losses of the last kTrainLossSteps updated steps (a ring), for the train loss.
  struct RecentLosses {
    double loss[kTrainLossSteps] = {};
    long n = 0;  // pushed so far
    void push(double x) { loss[n++ % kTrainLossSteps] = x; }
    long count() const { return std::min(n, kTrainLossSteps); }
    double mean() const {
      double sum = 0;
      for (long i = 0; i < count(); ++i) sum += loss[i];
      return count() ? sum / count() : std::nan("");
    }
  };

  // The end event: the last line of metrics.jsonl on every way out of run().
  void write_end(const TrainResult& res) {
    RunEnd e;
    e.step = res.stop_step > 0 ? res.stop_step : res.steps;
    e.reason = res.stop_reason == "interrupted" ? "interrupted" : res.diverged ? "diverged" : "done";
    e.detail = res.stop_reason == "interrupted" ? "" : res.stop_reason;
    if (res.train_loss_steps > 0) e.train_loss = res.train_loss;
    e.train_loss_steps = res.train_loss_steps;
    e.val_loss = res.val_loss;
    e.tokens_per_s = res.tokens_per_s;
    e.wall_s = res.wall_s;
    write_metrics(to_json(e));
  }

  double evaluate() {
    EvalBatches ev(split.validation, cfg.train.batch_size * comm.world(), cfg.model.seq_len,
                   std::max(1, cfg.train.eval_batches), comm.rank(), comm.world());
    return mean_loss(model, ev, &comm);
  }
};

Trainer::Trainer(const Config& cfg, const std::string& run_dir, bool resume,
                 const ResumeOptions& from)
    : Trainer(world_communicator(), cfg, run_dir, resume, from) {}
Trainer::Trainer(Communicator& comm, const Config& cfg, const std::string& run_dir, bool resume,
                 const ResumeOptions& from)
    : impl_(std::make_unique<Impl>(comm, cfg, run_dir, resume, from)) {}
Trainer::~Trainer() = default;
const Config& Trainer::config() const { return impl_->cfg; }
long Trainer::step() const { return impl_->state.step; }
long Trainer::train_tokens() const { return impl_->split.train.size(); }
long Trainer::val_tokens() const { return impl_->split.validation.size(); }
double Trainer::evaluate() { return impl_->evaluate(); }
double Trainer::val_bytes_per_token() const {
  const Impl& I = *impl_;
  return eval_bytes_per_token(EvalBatches(I.split.validation, I.cfg.train.batch_size * I.comm.world(),
                                          I.cfg.model.seq_len, std::max(1, I.cfg.train.eval_batches)),
                              *I.tokenizer.tok);
}
const Tokenizer& Trainer::tokenizer() const { return *impl_->tokenizer.tok; }
const std::optional<InitFromReport>& Trainer::init_report() const { return impl_->init_report; }
MatmulPrecision Trainer::matmul_precision() const {
  return impl_->model.matmul_precision() == GemmPrecision::bf16 ? MatmulPrecision::bf16
                                                                 : MatmulPrecision::float32;
}

MatmulPrecision resolve_matmul_precision(MatmulPrecision requested) {
  if (requested != MatmulPrecision::automatic) return requested;
  return bf16_hardware() ? MatmulPrecision::bf16 : MatmulPrecision::float32;
}
std::span<const float> Trainer::params() const { return impl_->model.params(); }
std::span<const float> Trainer::adam_m() const { return impl_->opt.m(); }
std::span<const float> Trainer::adam_v() const { return impl_->opt.v(); }
const TrainingState& Trainer::state() const { return impl_->state; }

TrainResult Trainer::run(const TrainHooks& hooks) {
  Impl& I = *impl_;
  const TrainConfig& tc = I.cfg.train;
  const auto t_start = std::chrono::steady_clock::now();
  Impl::Window window{t_start};
  Impl::RecentLosses recent;
  long tokens_run = 0;  // trained by this process
  TrainResult res;
  const NextBatch next_batch = [&](int* idx, int* tgt) { I.sampler.next(idx, tgt); };
  const bool finished_before = I.state.step >= tc.steps;
  while (I.state.step < tc.steps) {
    // Every rank must agree to stop: a signal on any of them stops all.
    double stop = hooks.stop_requested && hooks.stop_requested() ? 1.0 : 0.0;
    I.comm.allreduce_sum(&stop, 1);
    if (stop > 0) {
      I.checkpoint();
      res.stop_reason = "interrupted";
      break;
    }
    const long step0 = I.state.step;  // 0-based index of this step
    const bool diag_step = I.diagnostics_due();
    const StepResult sr = I.train_step.run(next_batch, diag_step, [&](std::span<float> g, double& loss) {
      if (hooks.inject) hooks.inject(step0, g, loss);
    });
    ++window.steps;
    window.comm_s += sr.comm_s;
    const double lr = learning_rate(I.cfg.optim, step0, tc.steps);
    const StepDecision d = I.guard.decide(sr.loss.loss, sr.grad_norm, tc.spike_policy, I.has_checkpoint());
    if (d.action == StepAction::rollback) {
      if (auto why = I.roll_back(sr, d, hooks)) {
        res.diverged = true;
        res.stop_reason = *why;
        res.stop_step = step0 + 1;
        break;
      }
      continue;
    }
    StepRecord rec = I.advance(sr, d, lr, diag_step);
    window.tokens += I.tokens_per_step();
    tokens_run += I.tokens_per_step();
    if (d.action == StepAction::update && d.finite) recent.push(rec.loss);
    std::optional<std::string> why;
    if (hooks.check_divergence) why = hooks.check_divergence(rec);
    if (!why && d.bad_run >= tc.max_bad_steps)
      why = fmt::format(
          "diverged: {} consecutive skipped steps (non-finite or spiking loss/gradient), last at "
          "step {}; last good checkpoint: {}", d.bad_run, rec.step,
          I.has_checkpoint() ? latest_checkpoint(I.run_dir) : std::string("none"));
    // The step that stops the run is logged, on the log interval or not.
    if (I.log_due(rec, diag_step, d) || why) I.log(rec, window, t_start, hooks, res);
    if (why) {
      res.diverged = true;
      res.stop_reason = *why;
      res.stop_step = rec.step;
      break;
    }
    if (I.checkpoint_due(rec.step)) I.checkpoint();
  }
  res.steps = I.state.step;
  res.train_loss = recent.mean();
  res.train_loss_steps = recent.count();
  res.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  res.tokens_per_s = res.wall_s > 0 ? tokens_run / res.wall_s : 0;
  if (finished_before) {
    // Nothing was left to train: the result is the run's, as its end event said (kept).
    if (!I.previous_end) return res;
    const RunEnd& e = *I.previous_end;
    I.write_metrics(to_json(e));
    res.train_loss = e.train_loss.value_or(std::nan(""));
    res.train_loss_steps = e.train_loss_steps;
    res.val_loss = e.val_loss;
    res.diverged = e.reason == "diverged";
    if (res.diverged) res.stop_reason = e.detail, res.stop_step = e.step;
    res.tokens_per_s = e.tokens_per_s.value_or(0);
    res.wall_s = e.wall_s.value_or(0);
    return res;
  }
  if (!res.diverged && res.stop_reason.empty() && hooks.judge_end) {
    if (auto why = hooks.judge_end(res)) {
      res.diverged = true;
      res.stop_reason = *why;
      res.stop_step = res.steps;
    }
  }
  I.write_end(res);
  return res;
}

}  // namespace normlab
