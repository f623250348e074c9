#include "io/metrics.h"

#include <cmath>
#include <filesystem>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "normlab/errors.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {
// metrics.csv's columns, in this order (docs/metrics.md). New columns go at the end.
const char* const kColumns[] = {metric::step,      metric::tokens,       metric::loss,
                                metric::ce,        metric::z_loss,       metric::lr,
                                metric::grad_norm, metric::tokens_per_s, metric::val_loss,
                                metric::log_z_mean, metric::time_s,      nullptr};

constexpr MetricField kFields[] = {
    {metric::step, "step", "optimizer steps completed (the step this record closes)"},
    {metric::tokens, "step", "tokens seen so far, over all ranks and micro-batches"},
    {metric::loss, "step", "training loss of this step's global batch: ce + z_loss"},
    {metric::ce, "step", "mean cross-entropy of this step's global batch (nats per token)"},
    {metric::z_loss, "step", "train.z_loss * mean(log^2 Z) of this step's batch"},
    {metric::log_z_mean, "step", "mean log Z of the output softmax over this step's batch"},
    {metric::lr, "step", "learning rate used by this step"},
    {metric::grad_norm, "step", "global L2 norm of the gradient before clipping"},
    {metric::tokens_per_s, "step", "tokens per second since the previous logged record"},
    {metric::skipped, "step", "the update of this step was skipped by the guards"},
    {metric::spike, "step", "the spike guard flagged this step's loss or gradient norm"},
    {metric::nonfinite, "step", "this step's loss or gradient norm was not finite"},
    {metric::skipped_total, "step", "skipped updates so far in the run"},
    {metric::val_loss, "step", "mean validation cross-entropy over train.eval_batches batches"},
    {metric::comm_ms_per_step, "step", "gradient all-reduce milliseconds per step (MPI only)"},
    {metric::time_s, "step", "seconds since the run started, summed across resumes"},
    {metric::qk_clip_heads, "step", "QK-Clip (optim.qk_clip > 0): query heads clipped this step"},
    {metric::qk_clip_max_logit, "step",
     "QK-Clip: the largest |attention logit| of the step, before the clip"},
    {metric::qk_clip_total, "step", "QK-Clip: head clips so far in the run"},
    {metric::grad_norm_block, "diagnostic", "gradient L2 norm of each block's parameters"},
    {metric::grad_norm_attn, "diagnostic", "gradient L2 norm of each block's attention"},
    {metric::grad_norm_mlp, "diagnostic", "gradient L2 norm of each block's MLP"},
    {metric::grad_norm_group, "diagnostic", "gradient L2 norm per parameter group"},
    {metric::resid_rms, "diagnostic",
     "RMS of the residual stream at each boundary: 0 embedding, 2l+1 after block l's attention, "
     "2l+2 after block l"},
    {metric::resid_max, "diagnostic", "max |x| of the residual stream at each boundary"},
    {metric::attn_max_logit, "diagnostic", "per layer: max |attention score| before the cap"},
    {metric::attn_max_logit_head, "diagnostic", "the same per layer and head (diag.per_head)"},
    {metric::attn_entropy, "diagnostic", "per layer: mean entropy of the attention rows (nats)"},
    {metric::attn_first_mass, "diagnostic",
     "per layer: mean attention probability on key position 0 over heads and query rows 1..T-1"},
    {metric::attn_sink_mass, "diagnostic",
     "model.attn_sink != none: per layer, the sink's mean probability over heads and query rows"},
    {metric::log_z_std, "diagnostic", "standard deviation of log Z over the batch"},
    {metric::log_z_max, "diagnostic", "max log Z over the batch"},
    {metric::max_logit, "diagnostic", "max |output logit| after the final soft-cap"},
    {metric::max_logit_raw, "diagnostic", "max |output logit| before the final soft-cap"},
    {metric::update_ratio, "diagnostic",
     "per group: ||w_after - w_before|| / ||w_before|| of the step's update"},
    {metric::update_rms, "diagnostic", "per group: RMS of w_after - w_before over its elements"},
    {metric::rms_g2v, "diagnostic",
     "per group: RMS of g^2 / max(v_hat, eps^2), the clipped gradient against the optimizer's "
     "bias-corrected second moment (Adam family; Muon's AdamW group)"},
    {metric::rms_g2v_max, "diagnostic", "the largest per-tensor RMS(g^2 / v_hat) of the step"},
    {metric::rms_g2v_max_tensor, "diagnostic", "the tensor it belongs to"},
    {metric::resid_kurtosis, "diagnostic",
     "a probed PyTorch run: per boundary, mean(s^4) / mean(s^2)^2 of the channels' RMS s"},
    {metric::nonfinite_forward, "diagnostic",
     "a probed PyTorch run: the first sublayer whose output was not finite on the step"},
    {metric::nonfinite_backward, "diagnostic",
     "a probed PyTorch run: the first sublayer, from the output down, whose gradient was not finite"},
    {metric::dyt_alpha, "diagnostic",
     "DyT / Derf models: per norm site, the learnable alpha after the step"},
    {metric::dyt_saturated, "diagnostic",
     "DyT / Derf models: per norm site, the fraction of its inputs (in the step's last forward "
     "pass) where |alpha x + s| is past phi's saturation: phi'(z) < phi'(0) / 10"},
    {metric::ngpt_alpha, "diagnostic",
     "nGPT models: per sublayer, the mean over channels of its eigen learning rate alpha after "
     "the step"},
    {metric::sigma_w, "diagnostic",
     "σReparam models: per reparametrized weight, sigma(W) = u^T W v of each row block (q, k, v; "
     "gate, up), the spectral norm estimate of the raw weight after the step"},
    {metric::sigma_gamma, "diagnostic",
     "σReparam models: per reparametrized weight, the learned gamma of each row block after the "
     "step: the spectral norm of W_hat = (gamma / sigma(W)) W"},
    {metric::event, "event", "the kind of event: \"rollback\" or \"end\""},
    {metric::to_step, "event", "the step of the checkpoint rolled back to"},
    {metric::checkpoint, "event", "the checkpoint folder rolled back to"},
    {metric::rollbacks_total, "event", "rollbacks so far in the run"},
    {metric::reason, "event", "end: how the run ended: \"done\", \"interrupted\" or \"diverged\""},
    {metric::detail, "event", "end: the stop reason (why it diverged), or empty"},
    {metric::train_loss, "event",
     "end: train loss, the mean optimized loss (ce + z_loss) of the last 20 updated steps"},
    {metric::train_loss_steps, "event", "end: how many steps the train loss averages (<= 20)"},
    {metric::wall_s, "event", "end: wall seconds of this process's run loop"},
};

nlohmann::json finite_or_null(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
double number_or_nan(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
}

void truncate_after(const fs::path& path, long resume_step, bool csv) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::vector<std::string> keep;
  std::string line;
  bool header = csv;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (header) {
      keep.push_back(line);
      header = false;
      continue;
    }
    long step = -1;
    try {
      if (csv) {
        step = std::stol(line.substr(0, line.find(',')));
      } else {
        const auto j = nlohmann::json::parse(line);
        if (j.value(metric::event, "") == "end") continue;  // the resumed run writes its own
        step = j.at("step").get<long>();
      }
    } catch (...) {
      continue;  // a torn last line from a crash
    }
    if (step <= resume_step) keep.push_back(line);
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (const auto& l : keep) out << l << '\n';
}
}  // namespace

const char* const* MetricsWriter::csv_columns() { return kColumns; }

std::span<const MetricField> metric_fields() { return kFields; }

nlohmann::json to_json(const StepRecord& r) {
  nlohmann::json j = {{metric::step, r.step},
                      {metric::tokens, r.tokens},
                      {metric::loss, finite_or_null(r.loss)},
                      {metric::ce, finite_or_null(r.ce)},
                      {metric::z_loss, finite_or_null(r.z_loss)},
                      {metric::log_z_mean, finite_or_null(r.lse_mean)},
                      {metric::lr, r.lr},
                      {metric::grad_norm, finite_or_null(r.grad_norm)},
                      {metric::tokens_per_s, r.tokens_per_s},
                      {metric::skipped, r.skipped},
                      {metric::spike, r.spike},
                      {metric::nonfinite, r.nonfinite},
                      {metric::skipped_total, r.skipped_total},
                      {metric::time_s, r.time_s}};
  if (r.val_loss) j[metric::val_loss] = *r.val_loss;
  if (r.comm_ms_per_step) j[metric::comm_ms_per_step] = *r.comm_ms_per_step;
  if (r.qk_clip_heads) j[metric::qk_clip_heads] = *r.qk_clip_heads;
  if (r.qk_clip_max_logit) j[metric::qk_clip_max_logit] = finite_or_null(*r.qk_clip_max_logit);
  if (r.qk_clip_total) j[metric::qk_clip_total] = *r.qk_clip_total;
  if (!r.diag.is_null()) j.update(r.diag);
  return j;
}

StepRecord step_record_from_json(const nlohmann::json& j) {
  StepRecord r;
  r.step = j.value(metric::step, 0L);
  r.tokens = j.value(metric::tokens, 0L);
  r.loss = number_or_nan(j, metric::loss);
  r.ce = number_or_nan(j, metric::ce);
  r.z_loss = number_or_nan(j, metric::z_loss);
  r.lse_mean = number_or_nan(j, metric::log_z_mean);
  r.lr = number_or_nan(j, metric::lr);
  r.grad_norm = number_or_nan(j, metric::grad_norm);
  r.tokens_per_s = number_or_nan(j, metric::tokens_per_s);
  r.skipped = j.value(metric::skipped, false);
  r.spike = j.value(metric::spike, false);
  r.nonfinite = j.value(metric::nonfinite, false);
  r.skipped_total = j.value(metric::skipped_total, 0L);
  r.time_s = j.value(metric::time_s, 0.0);
  if (j.contains(metric::val_loss)) r.val_loss = number_or_nan(j, metric::val_loss);
  if (j.contains(metric::comm_ms_per_step))
    r.comm_ms_per_step = number_or_nan(j, metric::comm_ms_per_step);
  if (j.contains(metric::qk_clip_heads)) r.qk_clip_heads = j.value(metric::qk_clip_heads, 0);
  if (j.contains(metric::qk_clip_max_logit))
    r.qk_clip_max_logit = number_or_nan(j, metric::qk_clip_max_logit);
  if (j.contains(metric::qk_clip_total)) r.qk_clip_total = j.value(metric::qk_clip_total, 0L);
  for (const MetricField& f : kFields)
    if (f.kind == "diagnostic" && j.contains(std::string(f.key))) r.diag[std::string(f.key)] = j.at(std::string(f.key));
  return r;
}

nlohmann::json to_json(const RollbackEvent& e) {
  return {{metric::step, e.step},           {metric::event, "rollback"},
          {metric::to_step, e.to_step},     {metric::checkpoint, e.checkpoint},
          {metric::loss, e.loss},           {metric::grad_norm, e.grad_norm},
          {metric::rollbacks_total, e.rollbacks_total}};
}

nlohmann::json to_json(const RunEnd& e) {
  auto opt = [](const std::optional<double>& v) {
    return v ? finite_or_null(*v) : nlohmann::json(nullptr);
  };
  return {{metric::event, "end"},
          {metric::step, e.step},
          {metric::reason, e.reason},
          {metric::detail, e.detail},
          {metric::train_loss, opt(e.train_loss)},
          {metric::train_loss_steps, e.train_loss_steps},
          {metric::val_loss, opt(e.val_loss)},
          {metric::tokens_per_s, opt(e.tokens_per_s)},
          {metric::wall_s, opt(e.wall_s)}};
}

RunEnd run_end_from_json(const nlohmann::json& j) {
  auto opt = [&](const char* key) -> std::optional<double> {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    return it->is_number() ? it->get<double>() : std::nan("");
  };
  RunEnd e;
  e.step = j.value(metric::step, 0L);
  e.reason = j.value(metric::reason, "");
  e.detail = j.value(metric::detail, "");
  e.train_loss = opt(metric::train_loss);
  e.train_loss_steps = j.value(metric::train_loss_steps, 0L);
  e.val_loss = opt(metric::val_loss);
  e.tokens_per_s = opt(metric::tokens_per_s);
  e.wall_s = opt(metric::wall_s);
  return e;
}

MetricsWriter::MetricsWriter(const std::string& run_dir, long resume_step) {
  const fs::path dir(run_dir);
  fs::create_directories(dir);
  if (resume_step >= 0) {
    truncate_after(dir / "metrics.jsonl", resume_step, false);
    truncate_after(dir / "metrics.csv", resume_step, true);
  }
  const bool new_csv = !fs::exists(dir / "metrics.csv") || fs::file_size(dir / "metrics.csv") == 0;
  jsonl_.open(dir / "metrics.jsonl", std::ios::app);
  csv_.open(dir / "metrics.csv", std::ios::app);
  if (!jsonl_ || !csv_) throw Error(fmt::format("cannot write metrics in {}", run_dir));
  if (new_csv) {
    for (int i = 0; kColumns[i]; ++i) csv_ << (i ? "," : "") << kColumns[i];
    csv_ << '\n';
  }
}

void MetricsWriter::write(const nlohmann::json& r) {
  jsonl_ << r.dump() << '\n';
  jsonl_.flush();
  if (r.contains(metric::event)) return;  // event lines (rollback, end) are in metrics.jsonl only
  for (int i = 0; kColumns[i]; ++i) {
    if (i) csv_ << ',';
    auto it = r.find(kColumns[i]);
    if (it != r.end() && !it->is_null()) csv_ << it->dump();
  }
  csv_ << '\n';
  csv_.flush();
}

std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  if (!in) throw FormatError(fmt::format("{} has no metrics.jsonl", run_dir));
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

std::optional<RunEnd> run_end_of(const std::vector<nlohmann::json>& records) {
  // The last end event, unless step records follow it (a resumed process that never ended).
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->value(metric::event, "") == "end") return run_end_from_json(*it);
    if (!it->contains(metric::event)) break;
  }
  // No end event: the step records (events other than steps left out).
  std::vector<const nlohmann::json*> steps;
  for (const auto& r : records)
    if (!r.contains(metric::event) && r.contains(metric::step)) steps.push_back(&r);
  if (steps.empty()) return std::nullopt;
  RunEnd e;
  e.from_event = false;
  e.step = steps.back()->value(metric::step, 0L);
  double sum = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const StepRecord s = step_record_from_json(**it);
    if (s.step <= e.step - kTrainLossSteps) break;
    if (s.skipped || !std::isfinite(s.loss)) continue;
    sum += s.loss;
    ++e.train_loss_steps;
  }
  if (e.train_loss_steps > 0) e.train_loss = sum / e.train_loss_steps;
  for (auto it = steps.rbegin(); it != steps.rend() && !e.val_loss; ++it)
    e.val_loss = step_record_from_json(**it).val_loss;
  return e;
}

std::optional<RunEnd> read_run_end(const std::string& run_dir) {
  if (!fs::exists(fs::path(run_dir) / "metrics.jsonl")) return std::nullopt;
  return run_end_of(read_metrics(run_dir));
}

}  // namespace normlab
