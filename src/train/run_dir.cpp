#include "train/run_dir.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "io/atomic_file.h"
#include "normlab/checkpoint.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "train/checkpoint.h"
#include "train/run_tokenizer.h"

namespace fs = std::filesystem;

namespace normlab {

std::string resume_checkpoint(const std::string& dir, const ResumeOptions& from) {
  if (from.checkpoint.empty()) return resume_point(dir).checkpoint;
  fs::path ck = fs::path(from.checkpoint).lexically_normal();
  if (!ck.has_filename()) ck = ck.parent_path();
  const fs::path root = fs::path(dir) / "checkpoints";
  if (!fs::exists(ck) || !fs::exists(root) ||
      !fs::equivalent(fs::absolute(ck).parent_path(), root))
    throw InputError(
        fmt::format("{} is not a checkpoint of the run {}", from.checkpoint, dir));
  resume_point(ck.string());  // DamagedCheckpointError when it is damaged
  // Rewinding deletes what the run wrote after this checkpoint: only when asked to. Later damaged
  // checkpoints hold nothing to lose (they are moved aside).
  if (const auto later = later_intact_checkpoints(dir, ck.string()); !later.empty() && !from.rewind) {
    std::string names;
    for (const auto& l : later) names += (names.empty() ? "" : ", ") + fs::path(l).filename().string();
    throw InputError(fmt::format(
        "resuming from {} would rewind the run {}: it would delete the later checkpoint{} {} and "
        "the metrics records after step {}. To rewind, pass --rewind (Python: rewind=True; copy "
        "the run directory first to keep them); to continue from the newest checkpoint, --resume {}",
        from.checkpoint, dir, later.size() == 1 ? "" : "s", names,
        checkpoint_step(ck.string()), dir));
  }
  return ck.string();
}

Config resumed_config(const std::string& dir, const std::string& ckpt, const ResumeOptions& from) {
  if (!from.config) return resume_config(ResumePoint{dir, ckpt, {}});
  check_resume_config(checkpoint_config(ckpt), *from.config);
  return *from.config;
}

void refuse_existing_run(const std::string& dir) {
  if (has_checkpoint(dir))
    throw InputError(fmt::format("run directory {} already holds a checkpoint: use --resume {} "
                                 "to continue it, or another --out", dir, dir));
}

OpenRun start_run_dir(const std::string& dir, const Config& cfg, std::string* tokenizer_file) {
  fs::create_directories(dir);
  if (!tokenizer_file->empty()) *tokenizer_file = save_run_tokenizer(dir, *tokenizer_file);
  std::ofstream(fs::path(dir) / "config.toml") << dump_config_toml(cfg);
  // A fresh run starts fresh metrics.
  fs::remove(fs::path(dir) / "metrics.jsonl");
  fs::remove(fs::path(dir) / "metrics.csv");
  return {std::make_unique<MetricsWriter>(dir), std::nullopt};
}

OpenRun continue_run_dir(const std::string& dir, const std::string& ckpt, const Config& cfg,
                         long step) {
  OpenRun r;
  const bool latest = is_latest_checkpoint(dir, ckpt);
  if (!latest) rewind_checkpoints(dir, ckpt);
  write_file_atomic((fs::path(dir) / "config.toml").string(), dump_config_toml(cfg), "[run]");
  if (const auto e = read_run_end(dir); latest && e && e->from_event) r.previous_end = e;
  r.metrics = std::make_unique<MetricsWriter>(dir, step);  // drops the old end events
  return r;
}

bool has_checkpoint(const std::string& dir) {
  return fs::exists(fs::path(dir) / "checkpoints" / "latest");
}

}  // namespace normlab
