#include "cli/status.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <csignal>

#include <fmt/format.h>

#include "cli/commands.h"

namespace normlab::cli {

namespace {
std::atomic<int> g_signals{0};  // SIGINT/SIGTERM received so far
bool g_announce = false;

constexpr char kStopping[] =
    "normlab: stopping after this step, then saving a checkpoint (Ctrl-C again to exit now)\n";
constexpr char kExiting[] = "normlab: exiting now; the last complete checkpoint is kept\n";

// Async-signal-safe: a lock-free atomic, write(2) and _exit(2) only.
void on_signal(int) {
  if (g_signals.fetch_add(1) == 0) {
    if (g_announce) {
      // Starts on a line of its own when the status line is being redrawn on the terminal.
      if (isatty(STDERR_FILENO)) (void)!write(STDERR_FILENO, "\n", 1);
      (void)!write(STDERR_FILENO, kStopping, sizeof kStopping - 1);
    }
    return;
  }
  if (g_announce) (void)!write(STDERR_FILENO, kExiting, sizeof kExiting - 1);
  _exit(kExitInterrupted);
}

std::string eta(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const long t = static_cast<long>(s);
  return t >= 3600 ? fmt::format("{}h{:02d}m", t / 3600, static_cast<int>(t % 3600 / 60))
                   : fmt::format("{}m{:02d}s", t / 60, static_cast<int>(t % 60));
}

// Why the guards did what they did with the step ("" for a plain update).
std::string guard_note(const StepRecord& r) {
  if (r.skipped && r.nonfinite)
    return std::isfinite(r.loss) ? " | SKIPPED (non-finite gradient)"
                                 : " | SKIPPED (non-finite loss)";
  if (r.skipped && r.rollback_unavailable)
    return " | SKIPPED (spike; no checkpoint to roll back to yet, skipped instead)";
  if (r.skipped) return " | SKIPPED (spike)";
  if (r.spike) return " | spike (updated: train.spike_policy = off)";
  return "";
}
}  // namespace

void install_stop_signals(bool announce) {
  g_announce = announce;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
bool stop_signal_received() { return g_signals.load() > 0; }

std::string status_text(const StepRecord& r, long start_step) {
  // elapsed_s counts from the start of training in this process, i.e. from start_step.
  const long done = r.step - start_step;
  const double per_step = done > 0 ? r.elapsed_s / static_cast<double>(done) : -1;
  return fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {:>7.0f} tok/s | ETA {}{}{}", r.step,
      r.total_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s,
      eta(per_step * static_cast<double>(r.total_steps - r.step)),
      r.val_loss ? fmt::format(" | val {:.4f}", *r.val_loss) : std::string(), guard_note(r));
}

StatusLine::StatusLine(std::FILE* out, long start_step)
    : out_(out), tty_(isatty(fileno(out))), start_step_(start_step) {}

void StatusLine::update(const StepRecord& r) {
  const std::string line = status_text(r, start_step_);
  if (tty_) {
    fmt::print(out_, "\r\033[2K{}", line);
    dirty_ = true;
    if (r.val_loss) {
      fmt::print(out_, "\n");
      dirty_ = false;
    }
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
}

void StatusLine::finish() {
  if (tty_ && dirty_) fmt::print(out_, "\n");
  dirty_ = false;
}

}  // namespace normlab::cli
