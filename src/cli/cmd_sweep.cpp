// `normlab sweep`: a grid over config keys, one run directory per point, sequential or N
// processes in parallel, resumable, with the learning-rate sensitivity table.
#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/status.h"
#include "cli/sweep_runner.h"
#include "cli/summary_header.h"
#include "doctor/doctor.h"
#include "lab/external_command.h"
#include "lab/sweep.h"
#include "normlab/checkpoint.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "tensor/threading.h"
#include "train/divergence.h"

extern char** environ;
namespace fs = std::filesystem;

namespace normlab::cli {

namespace {

TrainHooks stop_hooks() {
  TrainHooks h;
  h.stop_requested = [] { return stop_signal_received(); };
  return h;
}

Config point_config(const ConfigOptions& base, const SweepPoint& p, int threads) {
  std::vector<std::string> ov = base.overrides;
  for (const auto& [k, v] : p.overrides) ov.push_back(k + "=" + v);
  if (threads > 0) ov.push_back("train.threads=" + std::to_string(threads));
  Config cfg = load_config(base.config_path, ov);
  apply_seed(cfg, p);
  return cfg;
}

struct SweepOptions {
  ConfigOptions cfg;
  std::vector<std::string> grid;
  std::string out = "runs/sweep", lr_key = "optim.lr";
  int jobs = 1;
  int seeds = 1;
  std::string command;  // --command: an external trainer per point
};

// The config of every point, validated before any run starts (every problem at once).
std::vector<Config> point_configs(const SweepOptions& o, const std::vector<SweepPoint>& points,
                                  int threads) {
  std::vector<std::string> problems;
  std::vector<Config> cfgs;
  for (const auto& p : points) {
    try {
      cfgs.push_back(point_config(o.cfg, p, threads));
    } catch (const ConfigError& e) {
      for (const auto& x : e.problems) problems.push_back(p.name + ": " + x);
    }
  }
  if (!problems.empty()) throw ConfigError(problems);
  return cfgs;
}

// Starts a `sweep-point` worker process for one point; returns its pid.
pid_t spawn_point(const Config& cfg, const std::string& dir) {
  fs::create_directories(dir);
  const std::string cfg_path = (fs::path(dir) / "requested.toml").string();
  std::ofstream(cfg_path) << dump_config_toml(cfg);
  std::vector<std::string> args = {"/proc/self/exe", "sweep-point", "--config", cfg_path, "--out", dir};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  std::string self = fs::read_symlink("/proc/self/exe").string();
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    throw Error("cannot start a sweep worker process");
  return pid;
}

// "training", or "resuming at step S" for a point with a checkpoint.
std::string resume_note(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "checkpoints" / "latest")) return "training";
  const std::string ckpt = fs::path(latest_checkpoint(dir)).filename().string();  // step_NNNNNNNN
  const auto digits = ckpt.find_first_of("123456789");
  return fmt::format("resuming at step {}",
                     digits == std::string::npos ? std::string("0") : ckpt.substr(digits));
}

// The step of the latest checkpoint in dir (0: none).
long checkpoint_step(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "checkpoints" / "latest")) return 0;
  const std::string ckpt = fs::path(latest_checkpoint(dir)).filename().string();  // step_NNNNNNNN
  const auto digits = ckpt.find_first_of("123456789");
  return digits == std::string::npos ? 0 : std::stol(ckpt.substr(digits));
}

// The step records a worker appended to its run's metrics.jsonl since byte `pos`, whole lines
// only (a line being written is read next time); a file rewritten shorter (a resume that drops
// records past its checkpoint) is read again from its start.
std::vector<StepRecord> new_step_records(const fs::path& path, std::uintmax_t& pos) {
  std::vector<StepRecord> out;
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  if (ec || size == pos) return out;
  if (size < pos) pos = 0;
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(pos));
  std::string line;
  while (std::getline(f, line) && !f.eof()) {
    pos += line.size() + 1;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.is_object() && !j.contains(metric::event) && j.contains(metric::step))
        out.push_back(step_record_from_json(j));
    } catch (const std::exception&) {
      // not a record (a torn line after a crash): skipped
    }
  }
  return out;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A finished point's status with its stop step and reason ("diverged at step 40: ...").
std::string point_outcome(const std::string& dir, const SweepPoint& p, const std::string& status) {
  if (status == "interrupted") return "interrupted";
  const SweepRun r = read_sweep_run(dir, p);
  if (r.status == "diverged") {
    return fmt::format("diverged at step {}: {}", r.steps, divergence_reason(r.message));
  }
  return r.status;
}

// Trains every point not yet finished: in this process with one job, else in up to `jobs`
// worker processes at a time. Stops starting points once a stop signal arrives. Shows each
// run's progress and the grid's (GridProgress); a worker's steps are read from its run's
// metrics.jsonl as it writes them.
void run_points(const SweepOptions& o, const std::vector<SweepPoint>& points,
                const std::vector<Config>& cfgs) {
  GridProgress progress(stdout, points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const std::string dir = (fs::path(o.out) / points[i].name).string();
    progress.plan(i, points[i].name, checkpoint_step(dir), cfgs[i].train.end_step(),
                  sweep_point_finished(dir));
  }
  struct Worker {
    std::size_t i;
    std::uintmax_t pos;  // how far its metrics.jsonl is read
    double t0;           // when it started (seconds_now)
  };
  std::map<pid_t, Worker> running;
  const auto poll_progress = [&] {
    for (auto& [pid, w] : running)
      for (StepRecord r :
           new_step_records(fs::path(o.out) / points[w.i].name / "metrics.jsonl", w.pos)) {
        r.total_steps = cfgs[w.i].train.end_step();
        r.elapsed_s = seconds_now() - w.t0;
        progress.update(w.i, r);
      }
  };
  const auto ended = [&](std::size_t i, const std::string& outcome) {
    progress.note(fmt::format("[{}] {}", points[i].name, outcome));
    progress.end(i, outcome.rfind("failed", 0) != 0 && outcome != "interrupted");
  };
  // Waits for a worker to end, showing the progress of all meanwhile.
  auto reap_one = [&] {
    for (;;) {
      int st = 0;
      const pid_t pid = ::waitpid(-1, &st, WNOHANG);
      if (pid > 0 && running.count(pid)) {
        poll_progress();  // its last steps
        const std::size_t i = running[pid].i;
        const std::string dir = (fs::path(o.out) / points[i].name).string();
        running.erase(pid);
        if (!o.command.empty()) {
          const std::string status = judge_external_point(dir, exit_code(st), exit_note(st, dir));
          ended(i, status == "failed" ? "failed: " + read_sweep_run(dir, points[i]).message
                                      : point_outcome(dir, points[i], status));
          return;
        }
        ended(i, WIFEXITED(st) && (WEXITSTATUS(st) == 0) ? point_outcome(dir, points[i], "")
                                                        : std::string("failed"));
        return;
      }
      if (pid < 0 && errno == ECHILD) {  // no child left: none of ours can be waited for
        for (const auto& [p, w] : running) ended(w.i, "failed");
        running.clear();
        return;
      }
      if (pid == 0) {
        poll_progress();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    }
  };
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (stop_signal_received()) break;
    const std::string dir = (fs::path(o.out) / points[i].name).string();
    if (sweep_point_finished(dir)) {
      progress.note(fmt::format("[{}] already finished ({}), skipped", points[i].name,
                                read_sweep_run(dir, points[i]).status));
      continue;
    }
    const std::string what = o.command.empty() ? resume_note(dir) : "running the command";
    if (o.jobs == 1 && o.command.empty()) {
      progress.note(fmt::format("[{}] {}", points[i].name, what));
      TrainHooks hooks = stop_hooks();
      hooks.on_log = [&](const StepRecord& r) { progress.update(i, r); };
      const std::string st = run_sweep_point(cfgs[i], dir, hooks);
      ended(i, point_outcome(dir, points[i], st));
      continue;
    }
    while (static_cast<int>(running.size()) >= o.jobs) reap_one();
    // Progress starts after the metrics it holds already (a resumed run's).
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(fs::path(dir) / "metrics.jsonl", ec);
    const pid_t pid = o.command.empty()
                          ? spawn_point(cfgs[i], dir)
                          : spawn_command(external_command(o.command, points[i], dir), dir);
    running[pid] = Worker{i, ec ? 0 : size, seconds_now()};
    progress.note(fmt::format("[{}] {} (pid {})", points[i].name, what, pid));
  }
  while (!running.empty()) reap_one();
  progress.close();
}

}  // namespace

void run_sweep_points(const std::string& out, const std::vector<SweepPoint>& points,
                      const std::vector<Config>& cfgs, int jobs, const std::string& command) {
  SweepOptions o;
  o.out = out;
  o.jobs = jobs;
  o.command = command;
  run_points(o, points, cfgs);
}

namespace {

// One line per run: `normlab doctor`'s verdict on it (docs/doctor.md).
void print_doctor_verdicts(const SweepOptions& o, const std::vector<SweepPoint>& points) {
  fmt::print("\ndoctor (normlab doctor {}/RUN for the details):\n", o.out);
  for (const auto& p : points) {
    const std::string dir = (fs::path(o.out) / p.name).string();
    std::string v = "not started";
    if (fs::exists(fs::path(dir) / "metrics.jsonl")) {
      try {
        v = diagnose_run(dir).verdict();
      } catch (const std::exception& e) {
        v = std::string("not diagnosed: ") + e.what();
      }
    }
    fmt::print("  {}: {}\n", p.name, v);
  }
}

// Reads every point's result (writing sweep.json and sensitivity.md when all have finished) and
// prints the runs and doctor's verdict on each, then the sensitivity or what a rerun continues.
void write_summary(const SweepOptions& o, const std::vector<GridAxis>& axes,
                   const std::vector<SweepPoint>& points) {
  const SweepSummary s = summarize_sweep(o.out, axes, points, o.lr_key);
  fmt::print("\n{}", runs_table(s.runs));
  print_doctor_verdicts(o, points);
  if (!s.unfinished.empty()) {
    std::string list;
    for (const auto& u : s.unfinished) list += (list.empty() ? "" : ", ") + u;
    fmt::print("\nsweep incomplete: {} of {} runs unfinished: {}.\nNo summary written; rerun the "
               "same command to continue them.\n", s.unfinished.size(), s.runs.size(), list);
    return;
  }
  // How the summary was made: command line, version, date, CPU, config (the grid's base).
  const Config base = o.cfg.load();
  prepend_to_file((fs::path(o.out) / "sensitivity.md").string(),
                  summary_header("normlab sweep", o.cfg, base,
                                 o.jobs > 1 ? std::max(1, available_cores() / o.jobs)
                                            : base.train.threads,
                                 o.jobs));
  fmt::print("\n{}\nwritten: {}/sweep.json, {}/sensitivity.md\n", s.table, o.out, o.out);
}

// On a rerun: which points are finished and which are resumed, before any training.
void announce_resume(const SweepOptions& o, const std::vector<SweepPoint>& points) {
  std::string finished, resumed;
  for (const auto& p : points) {
    const std::string dir = (fs::path(o.out) / p.name).string();
    if (sweep_point_finished(dir))
      finished += (finished.empty() ? "" : ", ") + p.name;
    else if (fs::exists(fs::path(dir) / "checkpoints" / "latest"))
      resumed += (resumed.empty() ? "" : ", ") + p.name + " (" + resume_note(dir).substr(9) + ")";
  }
  if (!finished.empty()) fmt::print("already finished: {}\n", finished);
  if (!resumed.empty()) fmt::print("resuming: {}\n", resumed);
  std::fflush(stdout);
}

int run_sweep(const SweepOptions& o) {
  std::vector<GridAxis> axes;
  for (const auto& g : o.grid) axes.push_back(parse_grid_axis(g));
  const auto points = expand_seeds(expand_grid(axes), o.seeds);
  const int threads = o.jobs > 1 ? std::max(1, available_cores() / o.jobs) : 0;
  // An external command's grid keys are its own: only their substitution is checked; the base
  // config gives the progress display its train.steps.
  std::vector<Config> cfgs;
  if (o.command.empty()) {
    cfgs = point_configs(o, points, threads);
    for (const std::string& w : mup_base_mismatches(cfgs, points, o.cfg.load()))
      fmt::print(stderr, "normlab: warning: {}\n", w);
  } else {
    for (const auto& p : points) external_command(o.command, p, (fs::path(o.out) / p.name).string());
    cfgs.assign(points.size(), o.cfg.load());
  }
  fs::create_directories(o.out);
  install_stop_signals();
  announce_resume(o, points);
  run_points(o, points, cfgs);
  write_summary(o, axes, points);
  return stop_signal_received() ? kExitInterrupted : kExitOk;
}

// Worker for --jobs > 1: one grid point in its own process.
void add_sweep_point(CLI::App& app, Action& action) {
  auto* w = app.add_subcommand("sweep-point", "(internal) train one sweep point");
  w->group("");
  auto wo = std::make_shared<std::pair<std::string, std::string>>();
  w->add_option("--config", wo->first)->required();
  w->add_option("--out", wo->second)->required();
  w->callback([&action, wo] {
    action = [wo] {
      install_stop_signals();
      run_sweep_point(load_config(wo->first), wo->second, stop_hooks());
      return kExitOk;
    };
  });
}

}  // namespace

void add_sweep(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("sweep", "Train a grid of configs and report learning-rate sensitivity "
                                          "(Wortsman et al. 2023)");
  cmd->footer("Divergence: " + DivergenceRule::describe() +
              "\nLR sensitivity: the mean over the lr grid of min(final val loss, initial loss) - best "
              "final val loss (diverged runs count with their initial loss); final val loss: the "
              "mean validation cross-entropy over train.eval_batches batches at the end of the run "
              "(train loss, last 20 steps, without evaluation).\nAn interrupted sweep writes no "
              "summary; rerun the same command to continue it.");
  auto o = std::make_shared<SweepOptions>();
  o->cfg.add_to(cmd);
  cmd->add_option("--grid", o->grid, "KEY=v1,v2,... or KEY=a:b:Nlog / a:b:Nlin (repeatable)")->required();
  cmd->add_option("--out,-o", o->out, "Sweep directory (one run per grid point, sweep.json)")->capture_default_str();
  cmd->add_option("--jobs,-j", o->jobs, "Runs in parallel (separate processes; cores are divided)")
      ->check(integer_option(1))->capture_default_str();
  cmd->add_option("--seeds", o->seeds,
                  "Runs per grid point: seed k trains with train.seed + k (initialisation and data "
                  "order) in OUT/NAME_seedK (seed 0: OUT/NAME); the tables give mean ± std "
                  "(min–max) over them")
      ->check(integer_option(1))
      ->capture_default_str();
  cmd->add_option("--command", o->command,
                  "Run each point with this external trainer instead of normlab's (through "
                  "normlab.torch.Probe): {KEY} is the point's value of grid key KEY, {out} its run "
                  "directory, {seed} its seed index, e.g. \"python train.py --lr {optim.lr} --out "
                  "{out}\"; run by /bin/sh, output in OUT/NAME/command.log; --set train.steps=N "
                  "sizes the progress bars");
  cmd->add_option("--lr-key", o->lr_key, "Grid key that holds the learning rate")->capture_default_str();
  cmd->callback([&action, o] { action = [o] { return run_sweep(*o); }; });
  add_sweep_point(app, action);
}

}  // namespace normlab::cli
