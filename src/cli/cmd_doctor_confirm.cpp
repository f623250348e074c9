// `normlab doctor RUN --confirm`: plans a control and a treatment arm per remedy for every
// problem doctor names (lab/confirm.h), trains the arms through the sweep runner, measures them
// and prints the verdicts (or, with --dry-run, the plan alone). The rendering of the confirmation
// lives here, apart from doctor's own (cmd_doctor.cpp).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/doctor_confirm.h"
#include "cli/status.h"
#include "cli/sweep_runner.h"
#include "doctor/doctor.h"
#include "lab/confirm_session.h"
#include "lab/seeds.h"

namespace fs = std::filesystem;

namespace normlab::cli {

namespace {

std::string num(double v, int digits = 4) {
  if (!std::isfinite(v)) return "-";
  if (std::fabs(v) >= 1e5) return fmt::format("{:.3e}", v);
  return fmt::format("{:.{}g}", v, digits);
}

std::string set_text(const std::vector<std::pair<std::string, std::string>>& set) {
  std::string s;
  for (const auto& [k, v] : set) s += (s.empty() ? "" : ", ") + k + " = " + v;
  return s;
}

void print_plan(const ConfirmPlan& p, const std::string& out) {
  fmt::print("\nCONFIRM {} (statistic {}, onset step {})\n", p.problem.kind, p.problem.statistic,
             p.problem.onset_step);
  fmt::print("  start: step {}{} ({})\n", p.start_step,
             p.start_checkpoint.empty() ? "" : " from " + p.start_checkpoint, p.start_why);
  fmt::print("  window: steps {}..{} ({})\n", p.start_step + 1, p.window_end, p.window_why);
  fmt::print("  arms ({} seeds each, data orders {} = 0..{}; in {}):\n", p.seeds,
             p.external ? "{seed}" : "train.data_seed", p.seeds - 1, out);
  for (const auto& a : p.arms) {
    if (a.name == "control" && !a.cannot.empty())
      fmt::print("    control: not run ({})\n", a.cannot);
    else if (a.name == "control")
      fmt::print("    control: the run's config unchanged (seed 0 replays the run)\n");
    else if (!a.cannot.empty())
      fmt::print("    {}: {} -- not run: {}\n", a.name, a.remedy, a.cannot);
    else
      fmt::print("    {}: {} [{}]\n", a.name, a.remedy, set_text(a.set));
  }
  for (const auto& n : p.notes) fmt::print("  note: {}\n", n);
  fmt::print("  estimated: {} arm runs x {} steps = {} steps\n", p.arms_run() * p.seeds,
             p.window_end - p.start_step, p.estimated_steps());
}

}  // namespace

void print_confirmation(const Confirmation& c, const std::string& out) {
  print_plan(c.plan, out);
  fmt::print("  control replay of the original: {}\n", c.replay_check);
  fmt::print("  {} per seed (loss at the window's end):\n", c.plan.problem.statistic);
  for (const auto& a : c.arms) {
    if (!a.cannot.empty()) continue;
    std::string seeds;
    for (std::size_t k = 0; k < a.stat.size(); ++k)
      seeds += fmt::format("{}{}{} ({})", k ? ", " : "", num(a.stat[k]),
                           a.diverged[k] ? " diverged" : "", num(a.loss_end[k]));
    fmt::print("    {:<9} {}  mean {}\n", a.name, seeds, format_spread(seed_stats(a.stat), 3));
  }
  for (std::size_t i = 0; i < c.verdicts.size(); ++i) {
    const RemedyVerdict& v = c.verdicts[i];
    fmt::print("  {}: {}: {}\n    {}\n", c.arms[i + 1].name, c.arms[i + 1].remedy,
               v.verdict == "cannot confirm" ? v.verdict : fmt::format("{}", v.verdict), v.reason);
  }
}

int run_doctor_confirm(const std::string& run_dir, const DoctorConfirmOptions& opt) {
  const Diagnosis d = diagnose_run(run_dir);
  const nlohmann::json diag = to_json(d);
  ConfirmOptions o;
  o.seeds = opt.seeds;
  o.jobs = opt.jobs;
  o.max_steps = opt.max_steps;
  o.command = opt.command;
  std::vector<ConfirmJob> jobs = confirm_jobs(run_dir, diag, d.config, o);
  if (jobs.empty()) {
    if (opt.json)
      fmt::print("{}\n", attach_confirmations(diag, jobs, nullptr).dump(2));
    else
      fmt::print("normlab doctor --confirm: {}\nnothing to confirm: doctor names no problem\n",
                 run_dir, d.verdict());
    return kExitOk;
  }
  if (opt.dry_run) {
    if (opt.json) {
      fmt::print("{}\n", attach_confirmations(diag, jobs, nullptr).dump(2));
    } else {
      fmt::print("normlab doctor --confirm --dry-run: {} (nothing is trained)\n", run_dir);
      for (const auto& j : jobs) print_plan(j.plan, j.out);
    }
    return kExitOk;
  }
  prepare_confirm_jobs(jobs, run_dir, o);
  install_stop_signals();
  // Progress goes to stderr with --json, so that stdout holds the JSON alone.
  std::fflush(stdout);
  const int saved_stdout = opt.json ? ::dup(1) : -1;
  if (saved_stdout >= 0) ::dup2(2, 1);
  for (const auto& j : jobs) {
    if (stop_signal_received()) break;
    fmt::print("confirming {}: {} arm runs in {}\n", j.plan.problem.kind, j.arms.points.size(),
               j.out);
    std::fflush(stdout);
    run_sweep_points(j.out, j.arms.points, j.arms.configs, o.jobs, o.command);
  }
  std::fflush(stdout);
  if (saved_stdout >= 0) ::dup2(saved_stdout, 1), ::close(saved_stdout);
  if (stop_signal_received()) {
    fmt::print(stderr, "interrupted: rerun the same command to continue the arms\n");
    return kExitInterrupted;
  }
  const std::vector<Confirmation> done = finish_confirmation(jobs, run_dir, diag, d.config, o);
  if (opt.json) {
    fmt::print("{}\n", attach_confirmations(diag, jobs, &done).dump(2));
    return kExitOk;
  }
  fmt::print("\nnormlab doctor --confirm: {}\ndoctor: {}\n", run_dir, d.verdict());
  for (std::size_t i = 0; i < done.size(); ++i) print_confirmation(done[i], jobs[i].out);
  return kExitOk;
}

}  // namespace normlab::cli
