// `normlab sweep`: a grid over config keys, one run directory per point, sequential or N
// processes in parallel, resumable, with the learning-rate sensitivity table.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/status.h"
#include "doctor/doctor.h"
#include "lab/divergence.h"
#include "lab/sweep.h"
#include "normlab/checkpoint.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "tensor/threading.h"

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
  return load_config(base.config_path, ov);
}

struct SweepOptions {
  ConfigOptions cfg;
  std::vector<std::string> grid;
  std::string out = "runs/sweep", lr_key = "optim.lr";
  int jobs = 1;
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

// A finished point's status with its stop step and reason ("diverged at step 40: ...").
std::string point_outcome(const std::string& dir, const SweepPoint& p, const std::string& status) {
  if (status == "interrupted") return "interrupted";
  const SweepRun r = read_sweep_run(dir, p);
  if (r.status == "diverged") {
    const std::string_view why = r.message.starts_with("diverged: ")
                                     ? std::string_view(r.message).substr(10)
                                     : std::string_view(r.message);
    return fmt::format("diverged at step {}: {}", r.steps, why);
  }
  return r.status;
}

// Trains every point not yet finished: in this process with one job, else in up to `jobs`
// worker processes at a time. Stops starting points once a stop signal arrives.
void run_points(const SweepOptions& o, const std::vector<SweepPoint>& points,
                const std::vector<Config>& cfgs) {
  std::map<pid_t, std::size_t> running;
  auto reap_one = [&] {
    int st = 0;
    const pid_t pid = ::wait(&st);
    if (pid > 0 && running.count(pid)) {
      const auto& p = points[running[pid]];
      const std::string dir = (fs::path(o.out) / p.name).string();
      fmt::print("[{}] {}\n", p.name,
                 WIFEXITED(st) && (WEXITSTATUS(st) == 0) ? point_outcome(dir, p, "")
                                                          : std::string("failed"));
      running.erase(pid);
    }
  };
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (stop_signal_received()) break;
    const std::string dir = (fs::path(o.out) / points[i].name).string();
    if (sweep_point_finished(dir)) {
      fmt::print("[{}] already finished ({}), skipped\n", points[i].name,
                 read_sweep_run(dir, points[i]).status);
      continue;
    }
    const std::string what = resume_note(dir);
    if (o.jobs == 1) {
      fmt::print("[{}] {}\n", points[i].name, what);
      std::fflush(stdout);
      const std::string st = run_sweep_point(cfgs[i], dir, stop_hooks());
      fmt::print("[{}] {}\n", points[i].name, point_outcome(dir, points[i], st));
      continue;
    }
    while (static_cast<int>(running.size()) >= o.jobs) reap_one();
    const pid_t pid = spawn_point(cfgs[i], dir);
    running[pid] = i;
    fmt::print("[{}] {} (pid {})\n", points[i].name, what, pid);
    std::fflush(stdout);
  }
  while (!running.empty()) reap_one();
}

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
  const auto points = expand_grid(axes);
  const int threads = o.jobs > 1 ? std::max(1, available_cores() / o.jobs) : 0;
  const std::vector<Config> cfgs = point_configs(o, points, threads);
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
  cmd->add_option("--lr-key", o->lr_key, "Grid key that holds the learning rate")->capture_default_str();
  cmd->callback([&action, o] { action = [o] { return run_sweep(*o); }; });
  add_sweep_point(app, action);
}

}  // namespace normlab::cli
