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

  Impl(const Config& c, const std::string& dir, bool resume)
      : cfg(resume ? checkpoint_config(latest_checkpoint(dir)) : c),
        run_dir(dir),
        corpus(load_corpus(cfg.data)),
        split(corpus.split(cfg.data.val_fraction, cfg.model.seq_len)),
        model(cfg.model, cfg.train.batch_size, cfg.model.seq_len),
        opt(model.table(), cfg.optim),
        sampler(split.train, cfg.train.batch_size, cfg.model.seq_len, cfg.train.seed ^ 0x5eedda7aull) {
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
    save_checkpoint(run_dir, cfg, model, opt, state, cfg.train.keep_checkpoints);
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
  int n_window = 0, nonfinite_run = 0;
  std::deque<double> recent;  // recent finite losses, for the spike flag
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
    const double lr = learning_rate(cfg.optim, I.state.step, total);
    const double gnorm = I.opt.grad_norm(I.model.grads());
    const bool finite = std::isfinite(sum.loss) && std::isfinite(gnorm);
    I.model.set_collect_stats(false);
    if (diag_step) std::copy(I.model.params().begin(), I.model.params().end(), I.before.begin());
    if (finite) {
      I.opt.step(I.model.params(), I.model.grads(), lr);
      nonfinite_run = 0;
    } else {
      ++I.state.skipped_steps;  // no parameter or moment is touched
      ++nonfinite_run;
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
    // Spike: loss more than 6 standard deviations above the mean of the last 50 finite losses.
    bool spike = false;
    if (finite) {
      if (recent.size() >= 50) {
        const double mean = std::accumulate(recent.begin(), recent.end(), 0.0) / recent.size();
        double var = 0;
        for (double x : recent) var += (x - mean) * (x - mean);
        const double sd = std::sqrt(var / recent.size());
        spike = sd > 0 && (sum.loss - mean) / sd > 6.0;
        recent.pop_front();
      }
      recent.push_back(sum.loss);
    }
    if (diag_step) {
      rec.diag = diagnostics_json(I.model, I.model.grads(), finite ? std::span<const float>(I.before)
                                                                  : std::span<const float>(),
                                  cfg.diag.per_head);
      rec.diag["spike"] = spike;
      rec.diag["nonfinite"] = !finite;
    }
    if (cfg.train.eval_interval > 0 && (s % cfg.train.eval_interval == 0 || last))
      rec.val_loss = I.evaluate();
    if (s == 1 || last || (cfg.train.log_interval > 0 && s % cfg.train.log_interval == 0) ||
        rec.val_loss || diag_step) {
      const auto now = clock::now();
      const double dt = std::chrono::duration<double>(now - t_window).count();
      rec.step = s;
      rec.total_steps = total;
      rec.tokens = I.state.tokens_seen;
      rec.loss = sum.loss;
      rec.ce = sum.ce;
      rec.z_loss = sum.z_loss;
      rec.lse_mean = sum.lse_mean;
      rec.lr = lr;
      rec.grad_norm = gnorm;
      rec.tokens_per_s = dt > 0 ? tokens_window / dt : 0;
      rec.elapsed_s = std::chrono::duration<double>(now - t_start).count();
      rec.skipped = !finite;
      nlohmann::json j = {{"step", rec.step},         {"tokens", rec.tokens},
                          {"loss", rec.loss},         {"ce", rec.ce},
                          {"z_loss", rec.z_loss},     {"log_z_mean", rec.lse_mean},
                          {"lr", rec.lr},             {"grad_norm", rec.grad_norm},
                          {"tokens_per_s", rec.tokens_per_s}, {"skipped", rec.skipped},
                          {"skipped_total", I.state.skipped_steps}};
      if (!std::isfinite(rec.loss)) j["loss"] = nullptr;
      if (!std::isfinite(rec.grad_norm)) j["grad_norm"] = nullptr;
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
    if (nonfinite_run >= 10) {
      res.diverged = true;
      res.stop_reason = fmt::format("diverged: non-finite loss or gradient for 10 steps in a row "
                                    "(step {})", s);
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
