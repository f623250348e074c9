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
  std::unique_ptr<MetricsWriter> metrics;
  SpikeGuard guard;

  Impl(const Config& c, const std::string& dir, bool resume)
      : cfg(resume ? checkpoint_config(latest_checkpoint(dir)) : c),
        run_dir(dir),
        corpus(load_corpus(cfg.data)),
        split(corpus.split(cfg.data.val_fraction, cfg.model.seq_len)),
        model(cfg.model, cfg.train.batch_size, cfg.model.seq_len),
        opt(model.table(), cfg.optim),
        sampler(split.train, cfg.train.batch_size, cfg.model.seq_len, sampler_seed(cfg.train)),
        guard(cfg.train.spike_window, cfg.train.spike_threshold) {
    if (corpus.vocab_size() > cfg.model.vocab_size)
      throw InputError(fmt::format("corpus {} has vocabulary {} but model.vocab_size = {}",
                                   corpus.name(), corpus.vocab_size(), cfg.model.vocab_size));
    set_thread_count(cfg.train.threads);
    const long n = static_cast<long>(cfg.train.batch_size) * cfg.model.seq_len;
    idx.resize(n);
    tgt.resize(n);
    if (cfg.diag.interval > 0) before.resize(model.params().size());
    if (resume) {
      const std::string ckpt = latest_checkpoint(dir);
      load_checkpoint(ckpt, model, &opt, &state);
      sampler.restore({state.sampler_rng, static_cast<std::uint64_t>(state.sampler_draws)});
      guard.from_json(state.extra.value("guard", nlohmann::json::object()));
      metrics = std::make_unique<MetricsWriter>(dir, state.step);
    } else {
      if (fs::exists(fs::path(dir) / "checkpoints" / "latest"))
        throw InputError(fmt::format("run directory {} already holds a checkpoint: use --resume {} "
                                     "to continue it, or another --out", dir, dir));
      fs::create_directories(dir);
      const fs::path cpath = fs::path(dir) / "config.toml";
      std::ofstream(cpath) << dump_config_toml(cfg);
      model.init_params(cfg.train.seed);
      // A fresh run starts fresh metrics.
      fs::remove(fs::path(dir) / "metrics.jsonl");
      fs::remove(fs::path(dir) / "metrics.csv");
      metrics = std::make_unique<MetricsWriter>(dir);
    }
  }

  void checkpoint() {
    const SamplerState s = sampler.state();
    state.sampler_rng = s.rng_state;
    state.sampler_draws = static_cast<long>(s.batches_drawn);
    state.extra["guard"] = guard.to_json();
    save_checkpoint(run_dir, cfg, model, opt, state, cfg.train.keep_checkpoints);
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
    EvalBatches ev(split.validation, B, T, std::max(1, cfg.train.eval_batches));
    double sum = 0;
    for (int k = 0; k < ev.num_batches(); ++k) {
      ev.fill(k, idx.data(), tgt.data());
      sum += model.forward(idx.data(), tgt.data(), B, T, 0.0, false).ce;
    }
    return sum / ev.num_batches();
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
  int n_window = 0, bad_run = 0;
  TrainResult res;
  while (I.state.step < total) {
    if (hooks.stop_requested && hooks.stop_requested()) {
      I.checkpoint();
      res.stop_reason = "interrupted";
      break;
    }
    const bool diag_step = cfg.diag.interval > 0 &&
                           (I.state.step == 0 || (I.state.step + 1) % cfg.diag.interval == 0);
    I.model.zero_grad();
    LossStats sum;
    for (int a = 0; a < accum; ++a) {
      I.sampler.next(I.idx.data(), I.tgt.data());
      I.model.set_collect_stats(diag_step && a == accum - 1);
      const LossStats st = I.model.forward(I.idx.data(), I.tgt.data(), B, T, cfg.train.z_loss,
                                           true, 1.0 / accum);
      I.model.backward();
      sum.loss += st.loss / accum;
      sum.ce += st.ce / accum;
      sum.z_loss += st.z_loss / accum;
      sum.lse_mean += st.lse_mean / accum;
    }
    I.model.set_collect_stats(false);
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
      I.metrics->write(ev);
      if (hooks.on_event) hooks.on_event(ev);
      if (bad_run >= cfg.train.max_bad_steps) {
        res.diverged = true;
        res.stop_reason = fmt::format("diverged: {} consecutive bad steps (last at step {}); last "
                                      "good checkpoint: {}", bad_run, from, ckpt);
        break;
      }
      continue;
    }
    if (diag_step) std::copy(I.model.params().begin(), I.model.params().end(), I.before.begin());
    if (act == Action::update) {
      I.opt.step(I.model.params(), I.model.grads(), lr);
      I.guard.accept(sum.loss, gnorm);
    } else {
      ++I.state.skipped_steps;  // no parameter or moment is touched
    }
    ++I.state.step;
    I.state.tokens_seen += static_cast<long>(B) * T * accum;
    tokens_window += static_cast<long>(B) * T * accum;
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
      if (!rec.diag.is_null()) j.update(rec.diag);
      I.metrics->write(j);
      if (hooks.on_log) hooks.on_log(rec);
      res.final_loss = n_window ? loss_window / n_window : rec.loss;
      res.tokens_per_s = rec.tokens_per_s;
      if (rec.val_loss) res.val_loss = rec.val_loss;
      t_window = now;
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
