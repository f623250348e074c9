// The metrics schema: every field a run writes to RUN_DIR/metrics.jsonl, named once.
//
// Writers (the trainer, the diagnostics) and readers (report, sweep, compare) use the constants in
// `normlab::metric` rather than string literals, and `metric_fields()` lists every field with its
// meaning, so that documentation and tests can check what a run writes. A step record is the
// struct StepRecord; `to_json` writes it exactly as metrics.jsonl holds it (non-finite numbers
// as null) and `step_record_from_json` reads one back.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace normlab {

namespace metric {
// Every step record.
inline constexpr const char* step = "step";                    // optimizer steps completed
inline constexpr const char* tokens = "tokens";                // tokens seen, all ranks
inline constexpr const char* loss = "loss";                    // ce + z_loss of the step
inline constexpr const char* ce = "ce";
inline constexpr const char* z_loss = "z_loss";
inline constexpr const char* log_z_mean = "log_z_mean";
inline constexpr const char* lr = "lr";
inline constexpr const char* grad_norm = "grad_norm";
inline constexpr const char* tokens_per_s = "tokens_per_s";
inline constexpr const char* skipped = "skipped";
inline constexpr const char* spike = "spike";
inline constexpr const char* nonfinite = "nonfinite";
inline constexpr const char* skipped_total = "skipped_total";
inline constexpr const char* val_loss = "val_loss";
inline constexpr const char* comm_ms_per_step = "comm_ms_per_step";
inline constexpr const char* time_s = "time_s";                // seconds since the run started
// Diagnostics (diag.interval > 0), merged into the step record.
inline constexpr const char* grad_norm_block = "grad_norm_block";
inline constexpr const char* grad_norm_attn = "grad_norm_attn";
inline constexpr const char* grad_norm_mlp = "grad_norm_mlp";
inline constexpr const char* grad_norm_group = "grad_norm_group";
inline constexpr const char* resid_rms = "resid_rms";
inline constexpr const char* resid_max = "resid_max";
inline constexpr const char* attn_max_logit = "attn_max_logit";
inline constexpr const char* attn_max_logit_head = "attn_max_logit_head";
inline constexpr const char* attn_entropy = "attn_entropy";
inline constexpr const char* attn_first_mass = "attn_first_mass";  // per layer: mass on key 0
inline constexpr const char* attn_sink_mass = "attn_sink_mass";    // per layer: the sink's mass
inline constexpr const char* log_z_std = "log_z_std";
inline constexpr const char* log_z_max = "log_z_max";
inline constexpr const char* max_logit = "max_logit";
inline constexpr const char* max_logit_raw = "max_logit_raw";
inline constexpr const char* update_ratio = "update_ratio";
inline constexpr const char* update_rms = "update_rms";                  // group -> RMS of w_after - w_before
inline constexpr const char* rms_g2v = "rms_g2v";                        // group -> RMS(g^2 / v_hat)
inline constexpr const char* rms_g2v_max = "rms_g2v_max";                // its largest per-tensor value
inline constexpr const char* rms_g2v_max_tensor = "rms_g2v_max_tensor";  // and that tensor's name
// A probed PyTorch run's kurtosis of the channels' RMS per boundary (normlab.torch.Probe)
inline constexpr const char* resid_kurtosis = "resid_kurtosis";
// A probed PyTorch run's first sublayer with a non-finite output / gradient (normlab.torch.Probe)
inline constexpr const char* nonfinite_forward = "nonfinite_forward";
inline constexpr const char* nonfinite_backward = "nonfinite_backward";
inline constexpr const char* dyt_alpha = "dyt_alpha";            // DyT/Derf site -> its alpha
inline constexpr const char* dyt_saturated = "dyt_saturated";    // site -> saturated fraction
inline constexpr const char* ngpt_alpha = "ngpt_alpha";          // nGPT sublayer -> mean alpha
inline constexpr const char* sigma_w = "sigma_w";                // σReparam weight -> sigma(W) per row block
inline constexpr const char* sigma_gamma = "sigma_gamma";        // weight -> gamma per row block
// QK-Clip (optim.qk_clip > 0), every step record.
inline constexpr const char* qk_clip_heads = "qk_clip_heads";            // query heads clipped this step
inline constexpr const char* qk_clip_max_logit = "qk_clip_max_logit";    // the largest logit before
inline constexpr const char* qk_clip_total = "qk_clip_total";            // head clips so far in the run
// Event records (not steps): a rollback to the last checkpoint; the end of the run.
inline constexpr const char* event = "event";
inline constexpr const char* to_step = "to_step";
inline constexpr const char* checkpoint = "checkpoint";
inline constexpr const char* rollbacks_total = "rollbacks_total";
inline constexpr const char* reason = "reason";                  // end: done, interrupted, diverged
inline constexpr const char* detail = "detail";                  // end: the stop reason's text
inline constexpr const char* train_loss = "train_loss";          // end: mean loss, last 20 steps
inline constexpr const char* train_loss_steps = "train_loss_steps";
inline constexpr const char* wall_s = "wall_s";
}  // namespace metric

// One field of metrics.jsonl and what it means.
struct MetricField {
  std::string_view key;
  std::string_view kind;  // "step", "diagnostic" or "event"
  std::string_view meaning;
};
// Every field a run may write, in the order above.
std::span<const MetricField> metric_fields();

// One logged training step, as the trainer reports it to hooks and writes it to metrics.jsonl.
struct StepRecord {
  long step = 0;         // optimizer steps completed
  long total_steps = 0;  // train.steps (not written)
  long tokens = 0;       // tokens seen
  double loss = 0, ce = 0, z_loss = 0, lse_mean = 0;
  double lr = 0, grad_norm = 0, tokens_per_s = 0;
  double elapsed_s = 0;  // since this process started training (not written)
  double time_s = 0;     // since the run started, summed across resumes
  std::optional<double> val_loss;
  bool skipped = false;   // the update was skipped (non-finite or spiking loss or gradient)
  bool spike = false;     // the spike guard flagged the step
  bool nonfinite = false; // the loss or the gradient norm was not finite
  long skipped_total = 0; // skipped updates so far in the run
  bool rollback_unavailable = false;  // a spike skipped although spike_policy = rollback: no
                                      // checkpoint to roll back to yet (not written)
  std::optional<double> comm_ms_per_step;  // gradient all-reduce time, with more than one rank
  // QK-Clip of this step (optim.qk_clip > 0): query heads clipped, the largest attention logit
  // before the clip, and the head clips of the run so far.
  std::optional<int> qk_clip_heads;
  std::optional<double> qk_clip_max_logit;
  std::optional<long> qk_clip_total;
  nlohmann::json diag;    // diagnostics fields, merged into the record
};

nlohmann::json to_json(const StepRecord& r);
// Reads the step fields of a metrics.jsonl record (diagnostics stay in `diag`); missing fields
// keep their defaults, nulls (non-finite values when written) read as NaN.
StepRecord step_record_from_json(const nlohmann::json& j);

// A rollback event record.
struct RollbackEvent {
  long step = 0;      // the step that was rolled back
  long to_step = 0;   // the checkpoint's step
  std::string checkpoint;
  double loss = 0, grad_norm = 0;
  long rollbacks_total = 0;
};
nlohmann::json to_json(const RollbackEvent& e);

// The end of a run, written by the trainer as the last line of metrics.jsonl on every way out of
// Trainer::run ({"event":"end",...}; a resumed run appends its own, and the last one wins).
struct RunEnd {
  long step = 0;       // the step the run reached (the step that stopped it, when one did)
  std::string reason;  // "done", "interrupted" or "diverged" ("" read back from step lines)
  std::string detail;  // the stop reason's text, or empty
  std::optional<double> train_loss;  // mean optimized loss of the last train_loss_steps updated steps
  long train_loss_steps = 0;         // at most 20
  std::optional<double> val_loss;    // the last evaluation's mean validation cross-entropy
  std::optional<double> tokens_per_s;  // tokens trained / wall seconds of this process's run loop
  std::optional<double> wall_s;
  bool from_event = true;  // false: reconstructed from the step lines of a run without end event
};
nlohmann::json to_json(const RunEnd& e);
RunEnd run_end_from_json(const nlohmann::json& j);
// How many updated steps the train loss averages.
inline constexpr long kTrainLossSteps = 20;

}  // namespace normlab
