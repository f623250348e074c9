// The training loop: data -> model -> loss -> AdamW, with gradient accumulation, clipping, the
// learning-rate schedule, evaluation, metrics, checkpoints and exact resume. The trainer never
// prints; it reports each logged step to a callback (the CLI draws the status line), and ends
// metrics.jsonl with an end event (normlab::RunEnd) however run() returns.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/checkpoint.h"
#include "normlab/config.h"
#include "normlab/tokenizer.h"
#include "normlab/metrics.h"

namespace normlab {

class Communicator;

struct TrainResult {
  long steps = 0;  // the step the run reached
  // Train loss: the mean optimized loss (ce + z_loss) of the last kTrainLossSteps updated
  // (non-skipped, finite) steps of the run, resumes included (the checkpoint holds them), over
  // train_loss_steps steps (fewer when the run has fewer); NaN when there are none.
  double train_loss = NAN;
  long train_loss_steps = 0;
  std::optional<double> val_loss;  // the last evaluation (at the end of a finished run)
  bool diverged = false;
  std::string stop_reason;  // "interrupted", or why the run diverged
  long stop_step = 0;       // the step that stopped the run (0: none did)
  double tokens_per_s = 0;  // run average: tokens trained / wall seconds of this process's run
  double wall_s = 0;
};

struct TrainHooks {
  std::function<void(const StepRecord&)> on_log;  // every log_interval steps and the last
  std::function<bool()> stop_requested;           // polled between steps (SIGINT/SIGTERM)
  // Called after every step with its loss; a returned reason stops the run as diverged.
  std::function<std::optional<std::string>(const StepRecord&)> check_divergence;
  // Called once when the run reaches train.steps; a returned reason marks it diverged.
  // with_divergence_rule() sets both to the rule of `normlab train`, sweep, compare and doctor.
  std::function<std::optional<std::string>(const TrainResult&)> judge_end;
  // Events that are not steps (a rollback), as written to metrics.jsonl.
  std::function<void(const nlohmann::json&)> on_event;
  // The hooks' own state (the divergence rule's smoothed loss), saved in every checkpoint and
  // handed back to a resumed run by Trainer::resumed_hook_state(), so that it continues exactly.
  std::function<nlohmann::json()> save_state;
  // Fault injection for tests: may change the gradients and the loss of 0-based step `step`
  // after the backward pass, before the guards look at them.
  std::function<void(long step, std::span<float> grads, double& loss)> inject;
};

// What a new run took from train.init_from: the checkpoint folder, the parameters copied from it,
// those initialised afresh (the source has no tensor of that name) and the source's tensors this
// model has no parameter for.
struct InitFromReport {
  std::string source;
  std::vector<std::string> copied, initialized, dropped;
};

// Where and how a run resumes (Trainer with resume = true).
struct ResumeOptions {
  // The checkpoint folder to continue from, one of run_dir/checkpoints/step_*; empty: the newest
  // intact one (resume_point() in checkpoint.h). An older one rewinds the run to it: the later
  // checkpoints are deleted and the metrics records after its step dropped (the run writes them
  // anew). Later damaged checkpoints are moved aside (step_N.damaged), never deleted.
  std::string checkpoint;
  // The config to continue with (resume_config() in checkpoint.h); none: the run's saved config.
  // Only resumable_keys() may differ from the checkpoint's config; it becomes the run's
  // config.toml.
  std::optional<Config> config;
  // Whether rewinding past a later intact checkpoint is wanted: without it, a `checkpoint` older
  // than an intact later one is refused (InputError naming what would be deleted).
  bool rewind = false;
  // The training data when it is no longer where the run recorded it (train --resume --data);
  // empty: data.path, else the run directory's data.path_from_run (train/run_data.h).
  std::string data;
};

// train.matmul_precision for this machine: automatic becomes bf16 when the CPU has AVX512-BF16,
// float32 otherwise; float32 and bf16 are returned as they are.
MatmulPrecision resolve_matmul_precision(MatmulPrecision requested);

class Trainer {
 public:
  // Starts a new run in run_dir (which must not hold a checkpoint) or, with resume, continues
  // a checkpoint of run_dir as `from` says (the latest, with the run's saved config, by default;
  // `cfg` is ignored then). Data-parallel over the process's world communicator (MPI when
  // launched by mpirun).
  Trainer(const Config& cfg, const std::string& run_dir, bool resume,
          const ResumeOptions& from = {});
  // The same over a given communicator (which must outlive the trainer).
  Trainer(Communicator& comm, const Config& cfg, const std::string& run_dir, bool resume,
          const ResumeOptions& from = {});
  ~Trainer();
  const Config& config() const;
  long step() const;
  // What TrainHooks::save_state returned when the checkpoint this run resumed from was written
  // (null for a new run, or a checkpoint written without it).
  const nlohmann::json& resumed_hook_state() const;
  // Tokens in the training and the validation part of the data.
  long train_tokens() const;
  long val_tokens() const;
  TrainResult run(const TrainHooks& hooks = {});
  // Mean validation cross-entropy over cfg.train.eval_batches fixed batches.
  double evaluate();
  // Bytes of text per token in those batches' targets (1 for the byte tokenizer): bits per byte
  // = evaluate() / ln 2 / val_bytes_per_token().
  double val_bytes_per_token() const;
  const Tokenizer& tokenizer() const;  // data.tokenizer as resolved
  // train.matmul_precision as resolved for this machine: float32 or bf16, never automatic.
  MatmulPrecision matmul_precision() const;
  // Set for a new run with train.init_from.
  const std::optional<InitFromReport>& init_report() const;
  // Read-only views of the parameter arena, the optimizer's state arenas (by checkpoint prefix:
  // "adam.m.", "muon.momentum.", ...) and the training state (tests, tools).
  std::span<const float> params() const;
  std::vector<std::pair<std::string, std::span<const float>>> optimizer_state() const;
  const TrainingState& state() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `hooks` with the divergence rule of `normlab train`, sweep and compare (src/train/divergence.h;
// docs/metrics.md, "diverged") as check_divergence and judge_end, for a run of `trainer` in
// `run_dir` (a resumed run takes its initial loss from step 1 of run_dir/metrics.jsonl). The
// rule's state lives in the returned hooks.
TrainHooks with_divergence_rule(TrainHooks hooks, const Trainer& trainer,
                                const std::string& run_dir);

// The seed of the training batch sampler, derived from train.seed (also used by tools that
// write a step-0 checkpoint, so that resuming it draws the batches a fresh run would).
inline std::uint64_t sampler_seed(const TrainConfig& t) { return t.seed ^ 0x5eedda7aull; }

}  // namespace normlab
