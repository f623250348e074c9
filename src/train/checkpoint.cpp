#include "normlab/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "model/weights.h"
#include "io/atomic_file.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"

namespace fs = std::filesystem;

namespace normlab {

nlohmann::json to_json(const TrainingState& s) {
  return {{"step", s.step},
          {"tokens_seen", s.tokens_seen},
          {"skipped_steps", s.skipped_steps},
          {"sampler_rng", std::to_string(s.sampler_rng)},
          {"sampler_draws", s.sampler_draws},
          {"extra", s.extra}};
}

TrainingState training_state_from_json(const nlohmann::json& j) {
  TrainingState s;
  try {
    s.step = j.at("step").get<long>();
    s.tokens_seen = j.at("tokens_seen").get<long>();
    s.skipped_steps = j.at("skipped_steps").get<long>();
    s.sampler_rng = std::stoull(j.at("sampler_rng").get<std::string>());
    s.sampler_draws = j.at("sampler_draws").get<long>();
    s.extra = j.value("extra", nlohmann::json::object());
  } catch (const std::exception& e) {
    throw FormatError(fmt::format("[checkpoint] training state is malformed: {}", e.what()));
  }
  return s;
}

namespace {

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string step_name(long step) { return fmt::format("step_{:08d}", step); }

}  // namespace

std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const Transformer<float>& model, const AdamW<float>& opt,
                            const TrainingState& state, int keep) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  fs::create_directories(root);
  const fs::path final_dir = root / step_name(state.step);
  const fs::path tmp_dir = root / (step_name(state.step) + ".tmp");
  fs::remove_all(tmp_dir);
  fs::create_directories(tmp_dir);

  const std::map<std::string, std::string> meta = {
      {"format", "pt"},
      {"normlab_config", config_to_json(cfg).dump()},
      {"step", std::to_string(state.step)}};
  save_weights(tmp_dir / "model.safetensors", model.table(), model.params().data(), meta);

  auto recs = weight_records(model.table(), opt.m().data(), "adam.m.");
  auto vrecs = weight_records(model.table(), opt.v().data(), "adam.v.");
  recs.insert(recs.end(), vrecs.begin(), vrecs.end());
  nlohmann::json sj = to_json(state);
  sj["adam_t"] = opt.steps_taken();
  write_safetensors(tmp_dir / "state.safetensors", recs, {{"state", sj.dump()}});
  fsync_path(tmp_dir);

  fs::remove_all(final_dir);
  fs::rename(tmp_dir, final_dir);
  fsync_path(root);
  write_file_atomic((root / "latest").string(), step_name(state.step) + "\n", "[checkpoint]");

  // Keep the newest `keep` complete checkpoints (never the one `latest` names).
  std::vector<fs::path> dirs;
  // Pruning renames first (atomic), then deletes: a crash mid-delete leaves a ".trash" folder,
  // never a half-deleted step_* folder that looks like a checkpoint.
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory()) continue;
    if (e.path().extension() == ".trash") fs::remove_all(e.path());
    else if (name.rfind("step_", 0) == 0 && e.path().extension() != ".tmp") dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (std::size_t i = 0; i + std::max(keep, 1) < dirs.size(); ++i)
    if (dirs[i] != final_dir) {
      const fs::path trash = dirs[i].string() + ".trash";
      fs::rename(dirs[i], trash);
      fs::remove_all(trash);
    }
  return final_dir.string();
}

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::ifstream f(root / "latest");
  std::string name;
  if (!f || !std::getline(f, name) || name.empty())
    throw FormatError(fmt::format("[checkpoint] {} has no complete checkpoint (no checkpoints/latest)",
                                  run_dir));
  const fs::path dir = root / name;
  if (!fs::exists(dir / "model.safetensors") || !fs::exists(dir / "state.safetensors"))
    throw FormatError(fmt::format("[checkpoint] {}: checkpoints/latest names {} but it is incomplete",
                                  run_dir, name));
  return dir.string();
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(p)) throw FormatError(fmt::format("[checkpoint] {} does not exist", path));
  // A file stands for its checkpoint folder only when it is the folder's model.safetensors: any
  // other would have the folder's model.safetensors read in its name.
  if (fs::is_regular_file(p)) {
    if (p.filename() != "model.safetensors")
      throw FormatError(fmt::format("[checkpoint] {} is not a checkpoint directory (give a run "
                                    "directory, a checkpoint folder or its model.safetensors)",
                                    path));
    return p.parent_path().string();
  }
  if (fs::exists(p / "model.safetensors")) return p.string();
  return latest_checkpoint(path);
}

Config checkpoint_config(const std::string& ckpt_dir) {
  const auto file = SafetensorsFile::open((fs::path(ckpt_dir) / "model.safetensors").string());
  auto it = file.metadata().find("normlab_config");
  if (it == file.metadata().end())
    throw FormatError(fmt::format("[checkpoint] {}: model.safetensors has no normlab_config metadata",
                                  ckpt_dir));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    throw FormatError(fmt::format("[checkpoint] {}: normlab_config is not valid JSON: {}", ckpt_dir,
                                  e.what()));
  }
  return config_from_json(j);
}

ResumePoint resume_point(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "RUN/" -> "RUN"
  if (!fs::exists(p)) throw FormatError(fmt::format("[checkpoint] {} does not exist", path));
  if (!fs::exists(p / "model.safetensors")) return {p.string(), latest_checkpoint(p.string())};
  // A checkpoint folder: it must be one of a run's, RUN/checkpoints/step_N, and complete.
  if (fs::absolute(p).parent_path().filename() != "checkpoints")
    throw FormatError(fmt::format("[checkpoint] {} is a checkpoint folder but not one of a run's "
                                  "(RUN/checkpoints/step_N): --resume continues a run",
                                  path));
  if (!fs::exists(p / "state.safetensors"))
    throw FormatError(
        fmt::format("[checkpoint] {} has no state.safetensors: it is incomplete", path));
  fs::path run = p.parent_path().parent_path();
  if (run.empty()) run = fs::absolute(p).parent_path().parent_path();
  return {run.string(), p.string()};
}

Config resume_config(const ResumePoint& p, const std::vector<std::string>& overrides) {
  const Config saved = checkpoint_config(p.checkpoint);
  const fs::path toml = fs::path(p.run_dir) / "config.toml";
  Config c = fs::exists(toml) ? load_config(toml.string(), overrides)
                              : parse_config(dump_config_toml(saved), p.checkpoint, overrides);
  check_resume_config(saved, c);
  return c;
}

bool is_latest_checkpoint(const std::string& run_dir, const std::string& ckpt_dir) {
  try {
    return fs::equivalent(ckpt_dir, latest_checkpoint(run_dir));
  } catch (const FormatError&) {
    return false;  // `latest` is missing or names an incomplete folder
  }
}

std::vector<std::string> rewind_checkpoints(const std::string& run_dir,
                                            const std::string& ckpt_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  const std::string name = fs::path(ckpt_dir).filename().string();
  write_file_atomic((root / "latest").string(), name + "\n", "[checkpoint]");
  std::vector<std::string> removed;
  // step_NNNNNNNN names sort as their steps.
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0 && !e.path().has_extension() && n > name)
      removed.push_back(e.path().string());
  }
  std::sort(removed.begin(), removed.end());
  for (const auto& d : removed) {
    const std::string trash = d + ".trash";
    fs::rename(d, trash);
    fs::remove_all(trash);
  }
  return removed;
}

void load_checkpoint(const std::string& ckpt_dir, Transformer<float>& model, AdamW<float>* opt,
                     TrainingState* state) {
  const fs::path dir(ckpt_dir);
  const auto wfile = SafetensorsFile::open((dir / "model.safetensors").string());
  // Stage everything, then commit.
  std::vector<float> m, v;
  TrainingState st;
  long adam_t = 0;
  if (opt || state) {
    const auto sfile = SafetensorsFile::open((dir / "state.safetensors").string());
    auto it = sfile.metadata().find("state");
    if (it == sfile.metadata().end())
      throw FormatError(fmt::format("[checkpoint] {}: state.safetensors has no state metadata", ckpt_dir));
    nlohmann::json sj;
    try {
      sj = nlohmann::json::parse(it->second);
      adam_t = sj.at("adam_t").get<long>();
    } catch (const std::exception& e) {
      throw FormatError(fmt::format("[checkpoint] {}: state metadata is malformed: {}", ckpt_dir, e.what()));
    }
    st = training_state_from_json(sj);
    if (opt) {
      m.assign(opt->m().size(), 0.f);
      v.assign(opt->v().size(), 0.f);
      for (const ParamSpec& s : model.table().specs()) {
        sfile.read_f32("adam.m." + s.name, std::span<float>(m.data() + s.offset, s.numel), s.shape);
        sfile.read_f32("adam.v." + s.name, std::span<float>(v.data() + s.offset, s.numel), s.shape);
      }
    }
  }
  load_weights(model, wfile);  // all-or-nothing on its own; the optimizer state was checked above
  if (opt) {
    opt->m() = std::move(m);
    opt->v() = std::move(v);
    opt->set_steps_taken(adam_t);
  }
  if (state) *state = st;
}

}  // namespace normlab
