#include "normlab/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

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

// A checkpoint folder's name, step_NNNNNNNN (no extension: not .tmp, .trash or .damaged).
bool is_checkpoint_name(const fs::path& p) {
  const std::string n = p.filename().string();
  return n.rfind("step_", 0) == 0 && !p.has_extension();
}


// What the reader says of a file whose header is not what the format wants.
std::string reader_verdict(const fs::path& file, const std::string& name) {
  try {
    SafetensorsFile::open(file.string());
  } catch (const FormatError& e) {
    return e.what();
  }
  return fmt::format("{} has a malformed header", name);  // not reached: the header was refused
}

// What is wrong with the safetensors file `file` (`name` in the message), from its size and its
// header alone: the format makes it 8 + header length + the largest data offset bytes long
// (safetensors.h). A header that is no header gets the reader's own message; everything else the
// reader checks when the file is loaded.
std::optional<std::string> safetensors_damage(const fs::path& file, const std::string& name) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return name + " is missing";
  if (!fs::is_regular_file(file, ec)) return name + " is not a file";
  const std::uintmax_t size = fs::file_size(file, ec);
  std::ifstream f(file, std::ios::binary);
  if (ec || !f) return fmt::format("{} cannot be read", name);
  if (size < 8)
    return fmt::format("{} is truncated ({} bytes, not even the 8-byte header length)", name, size);
  unsigned char prefix[8];
  f.read(reinterpret_cast<char*>(prefix), 8);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];
  constexpr std::uint64_t kMaxHeader = 100'000'000;  // the reader's limit
  if (n > kMaxHeader) return reader_verdict(file, name);
  if (8 + n > size)
    return fmt::format("{} is truncated (its header alone needs {} bytes, found {})", name, 8 + n,
                       size);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  if (!f) return fmt::format("{} cannot be read", name);
  // Depth-limited like the reader (a valid header nests 3 levels).
  struct TooDeep {};
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, [](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
      if (depth > 127) throw TooDeep{};
      return true;
    });
  } catch (...) {
    return reader_verdict(file, name);
  }
  if (!j.is_object()) return reader_verdict(file, name);
  std::uint64_t data_end = 0;
  for (const auto& [key, entry] : j.items()) {
    if (key == "__metadata__" || !entry.is_object()) continue;
    const auto o = entry.find("data_offsets");
    if (o != entry.end() && o->is_array() && o->size() == 2 && (*o)[1].is_number_unsigned())
      data_end = std::max(data_end, (*o)[1].get<std::uint64_t>());
  }
  const std::uint64_t expected = 8 + n + data_end;
  if (size < expected)
    return fmt::format("{} is truncated (expected {} bytes, found {})", name, expected, size);
  if (size > expected)
    return fmt::format("{} has {} bytes past its data (expected {} bytes, found {})", name,
                       size - expected, expected, size);
  return std::nullopt;
}

// The run directory a checkpoint folder belongs to (RUN of RUN/checkpoints/step_N); empty for a
// folder that is no run's.
std::string run_of(const fs::path& ckpt) {
  const fs::path abs = fs::absolute(ckpt).lexically_normal();
  if (abs.parent_path().filename() != "checkpoints") return {};
  fs::path run = ckpt.lexically_normal().parent_path().parent_path();
  if (run.empty()) run = ".";
  return run.string();
}

// The run's intact checkpoint folders, newest first.
std::vector<std::string> intact_checkpoints(const std::string& run_dir, bool with_state) {
  std::vector<std::string> out;
  if (run_dir.empty()) return out;
  for (const auto& c : run_checkpoints(run_dir))
    if (!checkpoint_damage(c, with_state)) out.push_back(c);
  std::reverse(out.begin(), out.end());
  return out;
}

std::string names_of(const std::vector<std::string>& dirs) {
  std::string s;
  for (const auto& d : dirs) s += (s.empty() ? "" : ", ") + fs::path(d).filename().string();
  return s;
}

// "RUN/checkpoints/step_00000100 does not exist; the run's checkpoints: ..." for a checkpoint
// folder of a run that is not there (pruned by train.keep_checkpoints, or never written).
std::string missing_checkpoint(const std::string& path) {
  const fs::path p = fs::path(path).lexically_normal();
  std::string msg = fmt::format("[checkpoint] {} does not exist", path);
  const std::string run = run_of(p);
  std::error_code ec;
  if (run.empty() || !is_checkpoint_name(p) || !fs::is_directory(p.parent_path(), ec)) return msg;
  const auto have = run_checkpoints(run);
  if (have.empty()) return msg + fmt::format("; the run {} has no checkpoint", run);
  std::string names;
  for (const auto& h : have)
    names += fmt::format("{}{}{}", names.empty() ? "" : ", ", fs::path(h).filename().string(),
                         checkpoint_damage(h) ? " (damaged)" : "");
  msg += fmt::format("; the run's checkpoints ({}): {}", p.parent_path().string(), names);
  const long want = checkpoint_step(p.string()), oldest = checkpoint_step(have.front());
  if (want >= 0 && want < oldest) msg += " (train.keep_checkpoints removes the oldest ones)";
  return msg;
}

std::string damaged_message(const std::string& ckpt, const std::string& damage,
                            const std::vector<std::string>& intact) {
  std::string msg = fmt::format("checkpoint {} is damaged: {}", ckpt, damage);
  const std::string run = run_of(ckpt);
  if (run.empty()) return msg;
  if (intact.empty()) return msg + fmt::format("\nthe run {} has no intact checkpoint", run);
  return msg + fmt::format("\nintact checkpoints of the run {} (newest first): {}", run,
                           names_of(intact));
}

}  // namespace

DamagedCheckpointError::DamagedCheckpointError(std::string ckpt, std::string what,
                                               std::vector<std::string> ok)
    : FormatError(damaged_message(ckpt, what, ok)),
      checkpoint(std::move(ckpt)),
      damage(std::move(what)),
      intact(std::move(ok)) {}

std::optional<std::string> checkpoint_damage(const std::string& ckpt_dir, bool with_state) {
  std::error_code ec;
  if (!fs::is_directory(ckpt_dir, ec)) return std::string("the folder is missing");
  if (auto d = safetensors_damage(fs::path(ckpt_dir) / "model.safetensors", "model.safetensors"))
    return d;
  if (with_state)
    return safetensors_damage(fs::path(ckpt_dir) / "state.safetensors", "state.safetensors");
  return std::nullopt;
}

long checkpoint_step(const std::string& folder) {
  const fs::path p(folder);
  const std::string n = p.filename().string();
  if (n.rfind("step_", 0) != 0 || p.has_extension()) return -1;
  const std::string digits = n.substr(5);
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stol(digits);
}

std::vector<std::string> run_checkpoints(const std::string& run_dir) {
  std::vector<std::string> out;
  const fs::path root = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && is_checkpoint_name(e.path())) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());  // step_NNNNNNNN names sort as their steps
  return out;
}

std::string save_checkpoint(const std::string& run_dir, const Config& cfg,
                            const Transformer<float>& model, const Optimizer<float>& opt,
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

  // The optimizer's state by name (train/optimizer.h: StateArena), whichever optimizer it is:
  // each entry under its own name and shape.
  std::vector<TensorToWrite> recs;
  for (const StateArena<float>* a : opt.state())
    for (std::size_t i = 0; i < a->size(); ++i) {
      const StateEntry& e = a->entries[i];
      recs.push_back({e.name, DType::F32, e.shape,
                      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(a->at(i)),
                                                    sizeof(float) * e.numel)});
    }
  nlohmann::json sj = to_json(state);
  sj["optimizer"] = std::string(to_string(opt.kind()));
  sj["adam_t"] = opt.steps_taken();  // the optimizer's step count (the name predates Muon)
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
    else if (is_checkpoint_name(e.path())) dirs.push_back(e.path());
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

namespace {

// RUN/checkpoints/<the name `latest` holds>, which may be incomplete or missing.
fs::path latest_checkpoint_name(const fs::path& run_dir) {
  const fs::path root = run_dir / "checkpoints";
  std::ifstream f(root / "latest");
  std::string name;
  if (!f || !std::getline(f, name) || name.empty())
    throw FormatError(fmt::format("[checkpoint] {} has no complete checkpoint (no checkpoints/latest)",
                                  run_dir.string()));
  return root / name;
}

}  // namespace

std::string latest_checkpoint(const std::string& run_dir) {
  const fs::path dir = latest_checkpoint_name(run_dir);
  const std::string name = dir.filename().string();
  if (!fs::exists(dir / "model.safetensors") || !fs::exists(dir / "state.safetensors"))
    throw FormatError(fmt::format("[checkpoint] {}: checkpoints/latest names {} but it is incomplete",
                                  run_dir, name));
  return dir.string();
}

namespace {

// Throws DamagedCheckpointError for a damaged checkpoint folder; returns it otherwise.
std::string usable(const std::string& ckpt, bool with_state) {
  if (const auto d = checkpoint_damage(ckpt, with_state))
    throw DamagedCheckpointError(ckpt, *d, intact_checkpoints(run_of(ckpt), with_state));
  return ckpt;
}

std::string resolve_folder(const std::string& path) {
  const fs::path p(path);
  if (!fs::exists(p)) throw FormatError(missing_checkpoint(path));
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

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  return usable(resolve_folder(path), /*with_state=*/false);
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
  if (!fs::exists(p)) throw FormatError(missing_checkpoint(path));
  // RUN/checkpoints/step_N is a checkpoint folder even when its model.safetensors is missing.
  const bool folder =
      fs::exists(p / "model.safetensors") || (is_checkpoint_name(p) && !run_of(p).empty());
  if (!folder) {
    // A run directory: the checkpoint `latest` names or, past damaged ones, the newest intact one
    // before it.
    ResumePoint r{p.string(), {}, {}};
    const fs::path latest = latest_checkpoint_name(p);
    std::vector<std::string> older;
    for (const auto& c : run_checkpoints(p.string()))
      if (fs::path(c).filename() < latest.filename()) older.push_back(c);
    std::reverse(older.begin(), older.end());
    older.insert(older.begin(), latest.string());
    for (const auto& c : older) {
      if (const auto d = checkpoint_damage(c, /*with_state=*/true)) {
        r.passed_over.push_back({c, *d});
        continue;
      }
      r.checkpoint = c;
      return r;
    }
    throw DamagedCheckpointError(latest.string(), r.passed_over.front().damage, {});
  }
  // A checkpoint folder: it must be one of a run's, RUN/checkpoints/step_N, and intact.
  if (run_of(p).empty())
    throw FormatError(fmt::format("[checkpoint] {} is a checkpoint folder but not one of a run's "
                                  "(RUN/checkpoints/step_N): --resume continues a run",
                                  path));
  usable(p.string(), /*with_state=*/true);
  return {run_of(p), p.string(), {}};
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
  for (const auto& d : run_checkpoints(run_dir)) {
    if (fs::path(d).filename().string() <= name) continue;  // step_NNNNNNNN names sort as steps
    if (checkpoint_damage(d)) {
      // Kept for inspection, out of the way of the run's checkpoints.
      const std::string aside = d + ".damaged";
      fs::remove_all(aside);
      fs::rename(d, aside);
      continue;
    }
    removed.push_back(d);
  }
  for (const auto& d : removed) {
    const std::string trash = d + ".trash";
    fs::rename(d, trash);
    fs::remove_all(trash);
  }
  return removed;
}

std::vector<std::string> later_intact_checkpoints(const std::string& run_dir,
                                                  const std::string& ckpt_dir) {
  const std::string name = fs::path(ckpt_dir).filename().string();
  std::vector<std::string> out;
  for (const auto& d : run_checkpoints(run_dir))
    if (fs::path(d).filename().string() > name && !checkpoint_damage(d)) out.push_back(d);
  return out;
}

void load_checkpoint(const std::string& ckpt_dir, Transformer<float>& model, Optimizer<float>* opt,
                     TrainingState* state) {
  const fs::path dir(ckpt_dir);
  const auto wfile = SafetensorsFile::open((dir / "model.safetensors").string());
  // Stage everything, then commit.
  std::vector<std::vector<float>> staged;  // one per state arena of opt
  TrainingState st;
  long adam_t = 0;
  std::string saved_by = "adamw";  // checkpoints before the optimizer interface hold AdamW's
  if (opt || state) {
    const auto sfile = SafetensorsFile::open((dir / "state.safetensors").string());
    auto it = sfile.metadata().find("state");
    if (it == sfile.metadata().end())
      throw FormatError(fmt::format("[checkpoint] {}: state.safetensors has no state metadata", ckpt_dir));
    nlohmann::json sj;
    try {
      sj = nlohmann::json::parse(it->second);
      adam_t = sj.at("adam_t").get<long>();
      if (sj.contains("optimizer")) saved_by = sj.at("optimizer").get<std::string>();
    } catch (const std::exception& e) {
      throw FormatError(fmt::format("[checkpoint] {}: state metadata is malformed: {}", ckpt_dir, e.what()));
    }
    st = training_state_from_json(sj);
    if (opt) {
      if (saved_by != to_string(opt->kind()))
        throw FormatError(fmt::format(
            "[checkpoint] {}: its optimizer state is {}'s, not {}'s (optim.name cannot change on "
            "resume; start a new run from these weights with --init-from)",
            ckpt_dir, saved_by, to_string(opt->kind())));
      for (const StateArena<float>* a : std::as_const(*opt).state()) {
        std::vector<float> buf(a->data.size(), 0.f);
        for (const StateEntry& e : a->entries)
          sfile.read_f32(e.name, std::span<float>(buf.data() + e.offset, e.numel), e.shape);
        staged.push_back(std::move(buf));
      }
    }
  }
  load_weights(model, wfile);  // all-or-nothing on its own; the optimizer state was checked above
  if (opt) {
    const auto arenas = opt->state();
    for (std::size_t k = 0; k < arenas.size(); ++k) arenas[k]->data = std::move(staged[k]);
    opt->set_steps_taken(adam_t);
  }
  if (state) *state = st;
}

}  // namespace normlab
