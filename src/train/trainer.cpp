#include "normlab/trainer.h"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "diag/diagnostics.h"
#include "normlab/communicator.h"
#include "io/metrics.h"
#include "train/memory.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "tensor/rng.h"
#include "tensor/threading.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "train/guard.h"
#include "train/log_window.h"
#include "train/rollback.h"
#include "train/run_dir.h"
#include "train/evaluate.h"
#include "train/run_tokenizer.h"
#include "train/optimizer.h"
#include "train/qk_clip.h"
#include "train/run_data.h"
#include "train/schedule.h"
#include "train/step.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {

// A new run: model.vocab_size left at its default becomes the tokenizer's (resolve_vocab_size),
// and a token file's tokenizer, when data.tokenizer left it to the file, is written into the
// run's config, so that eval and generate of the run (and its config.toml) name it.
void settle_tokenizer(Config& cfg, const RunTokenizer& t) {
  resolve_vocab_size(cfg.model, t);
  if (cfg.data.tokenizer.empty() && token_file_info(cfg.data.path))
    cfg.data.tokenizer = t.file.empty() ? std::string("bytes") : t.file;
}

// The corpus of a new run (whose data path it records absolute and relative to its directory)
// or of a resumed one (found where it was recorded, or at from.data).
TokenCorpus open_corpus(Config& cfg, const RunTokenizer& t, const std::string& dir, bool resume,
                        const ResumeOptions& from) {
  if (!resume) {
    settle_tokenizer(cfg, t);
    record_data_path(cfg.data, dir);
  }
  check_vocab(cfg.model, t);
  return TokenCorpus::from_path(resume ? run_data_path(cfg.data, dir, from.data) : cfg.data.path,
                                *t.tok);
}

}  // namespace

struct Trainer::Impl {
  Communicator& comm;
  nlohmann::json resumed_hooks;  // the hooks' state in the checkpoint resumed from
  std::function<nlohmann::json()> save_hook_state;  // the running hooks' (TrainHooks::save_state)
  std::string resume_ckpt;  // the checkpoint a resumed run continues from (empty for a new run)
  Config cfg;
  std::string run_dir;
  RunTokenizer tokenizer;  // data.tokenizer as resolved (train/run_tokenizer.h)
  TokenCorpus corpus;
  CorpusSplit split;
  Transformer<float> model;
  std::unique_ptr<Optimizer<float>> opt;  // optim.name's (train/optimizer.h)
  BatchSampler sampler;
  TrainStep train_step;
  TrainingState state;
  std::vector<float> before;  // (P) parameters before the step, on diagnostic steps only
  OpenRun out;                // rank 0: the metrics writer, a resumed run's previous end event
  SpikeGuard guard;
  Rollbacks rollbacks;
  // The run's clock: seconds of earlier processes of this run (from the checkpoint) plus this
  // process's since it was ready to train. Written as time_s and saved in state.extra["time_s"].
  double time_before_s = 0;
  std::chrono::steady_clock::time_point clock_start;
  std::optional<InitFromReport> init_report;  // a new run started from train.init_from
  long qk_clip_total = 0;  // QK-Clip's head clips so far in the run (state.extra["qk_clip_total"])
  RecentLosses recent;     // the train loss's last losses (state.extra["recent_losses"])

  Impl(Communicator& cm, const Config& c, const std::string& dir, bool resume,
       const ResumeOptions& from)
      : comm(cm),
        resume_ckpt(resume ? resume_checkpoint(dir, from) : std::string()),
        cfg(resume ? resumed_config(dir, resume_ckpt, from) : c),
        run_dir(dir),
        // A resumed run uses its own copy of the tokenizer; a new one copies it in below.
        tokenizer(resolve_tokenizer(cfg, resume ? dir : std::string())),
        corpus(open_corpus(cfg, tokenizer, dir, resume, from)),
        split(corpus.split(cfg.data.val_fraction, cfg.model.seq_len)),
        // Refuses, before anything is allocated, a run that cannot fit in memory (train/memory.h).
        model(require_memory_fits(cfg), cfg.train.batch_size, cfg.model.seq_len),
        opt(make_optimizer<float>(model.table(), cfg.optim, cfg.model)),
        // train.batch_size rows per rank: every rank takes its slice of one global draw.
        sampler(split.train, cfg.train.batch_size * comm.world(), cfg.model.seq_len,
                sampler_seed(cfg.train), comm.rank(), comm.world()),
        train_step(model, comm,
                   {cfg.train.batch_size, cfg.model.seq_len, cfg.train.grad_accum,
                    cfg.train.z_loss, cfg.dist.bucket_size, cfg.dist.deterministic,
                    cfg.optim.grad_clip, opt->needs_attention_maxima()}),
        guard(cfg.train.spike_window, cfg.train.spike_threshold),
        rollbacks(cfg.train.max_bad_steps) {
    if (corpus.vocab_size() > cfg.model.vocab_size)
      throw InputError(fmt::format("corpus {} has vocabulary {} but model.vocab_size = {}",
                                   corpus.name(), corpus.vocab_size(), cfg.model.vocab_size));
    set_thread_count(cfg.train.threads);
    model.set_matmul_precision(resolve_matmul_precision(cfg.train.matmul_precision) ==
                                       MatmulPrecision::bf16
                                   ? GemmPrecision::bf16
                                   : GemmPrecision::float32);
    opt->set_matmul_precision(model.matmul_precision());
    if (cfg.diag.interval > 0) before.resize(model.params().size());
    if (resume) {
      load_checkpoint(resume_ckpt, model, opt.get(), &state);
      if (state.step > cfg.train.steps)
        throw ConfigError({fmt::format("train.steps = {} is below step {} of the checkpoint {}",
                                       cfg.train.steps, state.step, resume_ckpt)});
      sampler.restore({state.sampler_rng, static_cast<std::uint64_t>(state.sampler_draws)});
      guard.from_json(state.extra.value("guard", nlohmann::json::object()), true);
      time_before_s = state.extra.value(metric::time_s, 0.0);
      qk_clip_total = state.extra.value(metric::qk_clip_total, 0L);
      recent.from_json(state.extra.value("recent_losses", nlohmann::json::object()));
      resumed_hooks = state.extra.value("hooks", nlohmann::json());
      if (state.step > cfg.train.end_step())
        throw ConfigError({fmt::format("train.stop_at = {} is below step {} of the checkpoint {}",
                                       cfg.train.stop_at, state.step, resume_ckpt)});
      if (comm.is_root()) out = continue_run_dir(dir, resume_ckpt, cfg, state.step);
    } else {
      refuse_existing_run(dir);
      model.init_params(cfg.train.seed);  // identical on every rank (same seed)
      if (!cfg.train.init_from.empty()) {
        const std::string src = resolve_checkpoint(cfg.train.init_from);
        const WeightMatch w = load_matching_weights(
            model, SafetensorsFile::open((fs::path(src) / "model.safetensors").string()));
        init_report = InitFromReport{src, w.copied, w.initialized, w.dropped};
      }
      if (comm.is_root()) out = start_run_dir(dir, cfg, &tokenizer.file);
    }
    reshuffle_data_order();
    comm.barrier();
    clock_start = std::chrono::steady_clock::now();
  }

  // train.data_seed: mixed into the sampler's state once, where the run starts or resumes with a
  // data_seed other than the one its checkpoint recorded (state.extra["data_seed"], absent: 0),
  // so that a resumed replay arm keeps its own order and data_seed = 0 leaves the order alone.
  void reshuffle_data_order() {
    const std::uint64_t applied = state.extra.value("data_seed", std::uint64_t{0});
    if (cfg.train.data_seed == applied) return;
    SamplerState s = sampler.state();
    Rng mix(cfg.train.data_seed ^ 0xda7a0de5eedull);
    s.rng_state ^= mix.next_u64();
    sampler.restore(s);
    if (cfg.train.data_seed == 0)
      state.extra.erase("data_seed");
    else
      state.extra["data_seed"] = cfg.train.data_seed;
  }

  double time_s(std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) const {
    return time_before_s + std::chrono::duration<double>(now - clock_start).count();
  }

  // Only rank 0 writes metrics.
  void write_metrics(const nlohmann::json& j) {
    if (out.metrics) out.metrics->write(j);
  }

  // Every rank must agree to stop: a signal on any of them stops all.
  bool stop_agreed(const TrainHooks& hooks) {
    double stop = hooks.stop_requested && hooks.stop_requested() ? 1.0 : 0.0;
    comm.allreduce_sum(&stop, 1);
    return stop > 0;
  }

  void checkpoint() {
    const SamplerState s = sampler.state();
    state.sampler_rng = s.rng_state;
    state.sampler_draws = static_cast<long>(s.batches_drawn);
    state.extra["guard"] = guard.to_json();
    state.extra[metric::time_s] = time_s();
    state.extra["recent_losses"] = recent.to_json();
    if (save_hook_state) state.extra["hooks"] = save_hook_state();
    if (opt->qk_clip_events()) state.extra[metric::qk_clip_total] = qk_clip_total;
    if (comm.is_root()) save_checkpoint(run_dir, cfg, model, *opt, state, cfg.train.keep_checkpoints);
    comm.barrier();  // nobody reads a checkpoint before it is complete
  }

  long tokens_per_step() const {
    return static_cast<long>(cfg.train.batch_size) * cfg.model.seq_len * cfg.train.grad_accum *
           comm.world();
  }

  bool diagnostics_due() const {
    return cfg.diag.interval > 0 && (state.step == 0 || (state.step + 1) % cfg.diag.interval == 0);
  }

  bool log_due(const StepRecord& r, bool diag_step, const StepDecision& d) const {
    const long s = r.step;
    return s == 1 || s == cfg.train.end_step() ||
           (cfg.train.log_interval > 0 && s % cfg.train.log_interval == 0) || r.val_loss ||
           diag_step || d.action != StepAction::update || d.spike;
  }

  bool checkpoint_due(long s) const {
    return s == cfg.train.end_step() ||
           (cfg.train.checkpoint_interval > 0 && s % cfg.train.checkpoint_interval == 0);
  }

  // Rolls the step back (train/rollback.h) and records the event. Returns the stop reason when
  // the run has now been bad for too long.
  std::optional<std::string> roll_back(const StepResult& sr, const StepDecision& d,
                                       const TrainHooks& hooks) {
    const RollbackEvent ev = rollbacks.roll_back(run_dir, state.step + 1, sr.loss.loss,
                                                 sr.grad_norm, model, *opt, guard, sampler, state);
    const nlohmann::json j = to_json(ev);
    write_metrics(j);
    if (hooks.on_event && comm.is_root()) hooks.on_event(j);
    return rollbacks.too_many(ev, d.bad_run);
  }

  // The guards' stop reason after an applied or skipped step: too many consecutive bad steps.
  std::optional<std::string> too_many_bad_steps(const StepDecision& d, long step) const {
    if (d.bad_run < cfg.train.max_bad_steps) return std::nullopt;
    return fmt::format(
        "diverged: {} consecutive skipped steps (non-finite or spiking loss/gradient), last at "
        "step {}; last good checkpoint: {}", d.bad_run, step,
        has_checkpoint(run_dir) ? latest_checkpoint(run_dir) : std::string("none"));
  }

  // Applies (or skips) the step's update, with the clip factor the step computed, and advances
  // the training state. Returns the step's record with everything but the log window's rates.
  StepRecord update(const StepResult& sr, const StepDecision& d, double lr, bool diag_step) {
    if (diag_step) std::copy(model.params().begin(), model.params().end(), before.begin());
    const bool updated = d.action == StepAction::update;
    if (updated)
      opt->update(model.params(), model.grads(), lr, sr.clip_scale, {sr.attn_max_logit_head});
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
    if (updated && opt->qk_clip_events()) {
      const QkClipEvents& q = *opt->qk_clip_events();
      qk_clip_total += q.heads_clipped;
      r.qk_clip_heads = q.heads_clipped;
      r.qk_clip_max_logit = q.max_logit;
      r.qk_clip_total = qk_clip_total;
    }
    if (diag_step) {
      r.diag = diagnostics_json(model, model.grads(),
                                updated ? std::span<const float>(before) : std::span<const float>(),
                                cfg.diag.per_head);
      if (updated)
        r.diag.update(second_moment_json(
            model.table(), opt->second_moment_ratio(std::span<const float>(model.grads()))));
      r.diag[metric::spike] = d.spike;
      r.diag[metric::nonfinite] = !d.finite;
    }
    if (cfg.train.eval_interval > 0 &&
        (r.step % cfg.train.eval_interval == 0 || r.step == cfg.train.end_step()))
      r.val_loss = evaluate();
    return r;
  }

  // Writes the record with the window's rates, tells the hook, and starts a new window.
  void log(StepRecord& r, LogWindow& w, std::chrono::steady_clock::time_point t_start,
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
    w = LogWindow{now};
  }

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

  // A run resumed with nothing left to train: its result is the one its end event recorded
  // (written again as this process's end event).
  TrainResult previous_result(TrainResult res) {
    if (!out.previous_end) return res;
    const RunEnd& e = *out.previous_end;
    write_metrics(to_json(e));
    res.train_loss = e.train_loss.value_or(std::nan(""));
    res.train_loss_steps = e.train_loss_steps;
    res.val_loss = e.val_loss;
    res.diverged = e.reason == "diverged";
    if (res.diverged) res.stop_reason = e.detail, res.stop_step = e.step;
    res.tokens_per_s = e.tokens_per_s.value_or(0);
    res.wall_s = e.wall_s.value_or(0);
    return res;
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
const nlohmann::json& Trainer::resumed_hook_state() const { return impl_->resumed_hooks; }
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
std::vector<std::pair<std::string, std::span<const float>>> Trainer::optimizer_state() const {
  std::vector<std::pair<std::string, std::span<const float>>> out;
  for (const StateArena<float>* a : std::as_const(*impl_->opt).state())
    out.emplace_back(a->prefix, std::span<const float>(a->data));
  return out;
}
const TrainingState& Trainer::state() const { return impl_->state; }

TrainResult Trainer::run(const TrainHooks& hooks) {
  impl_->save_hook_state = hooks.save_state;
  Impl& I = *impl_;
  const TrainConfig& tc = I.cfg.train;
  const auto t_start = std::chrono::steady_clock::now();
  LogWindow window{t_start};
  RecentLosses& recent = I.recent;
  long tokens_run = 0;  // trained by this process
  TrainResult res;
  const NextBatch next_batch = [&](int* idx, int* tgt) { I.sampler.next(idx, tgt); };
  const long end_step = tc.end_step();  // train.stop_at, else train.steps
  const bool finished_before = I.state.step >= end_step;
  while (I.state.step < end_step) {
    if (I.stop_agreed(hooks)) {
      I.checkpoint();
      res.stop_reason = "interrupted";
      break;
    }
    const long step0 = I.state.step;  // 0-based index of this step
    const bool diag_step = I.diagnostics_due();
    // Batch, forward, backward, all-reduce, gradient norm and clip factor (train/step.h).
    const StepResult sr = I.train_step.run(next_batch, diag_step, [&](std::span<float> g, double& loss) {
      if (hooks.inject) hooks.inject(step0, g, loss);
    });
    ++window.steps;
    window.comm_s += sr.comm_s;
    const double lr = learning_rate(I.cfg.optim, step0, tc.steps);
    // The guards: update, skip, or roll back to the last checkpoint (train/guard.h).
    const StepDecision d = I.guard.decide(sr.loss.loss, sr.grad_norm, tc.spike_policy,
                                          has_checkpoint(I.run_dir));
    if (d.action == StepAction::rollback) {
      if (auto why = I.roll_back(sr, d, hooks)) {
        res.diverged = true;
        res.stop_reason = *why;
        res.stop_step = step0 + 1;
        break;
      }
      continue;
    }
    // The optimizer's update (or the skip), the step's record, its diagnostics and evaluation.
    StepRecord rec = I.update(sr, d, lr, diag_step);
    window.tokens += I.tokens_per_step();
    tokens_run += I.tokens_per_step();
    if (d.action == StepAction::update && d.finite) recent.push(rec.loss);
    std::optional<std::string> why;
    if (hooks.check_divergence) why = hooks.check_divergence(rec);
    if (!why) why = I.too_many_bad_steps(d, rec.step);
    // Log; the step that stops the run is logged, on the log interval or not.
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
  if (finished_before) return I.previous_result(res);
  // The end clause judges a run that reached train.steps, not one stopped early at
  // train.stop_at (a confirm arm's window): its loss is where training was, not where it ended.
  if (!res.diverged && res.stop_reason.empty() && hooks.judge_end && res.steps >= tc.steps) {
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
