#include "cli/status.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
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

namespace {
// The run's time left at its speed in this process.
std::string run_eta(const StepRecord& r, long start_step) {
  // elapsed_s counts from the start of training in this process, i.e. from start_step.
  const long done = r.step - start_step;
  const double per_step = done > 0 ? r.elapsed_s / static_cast<double>(done) : -1;
  return eta(per_step * static_cast<double>(r.total_steps - r.step));
}

// A run's line in a terminal's redrawn block: what fits in 80 columns first (step, loss, ETA).
std::string compact_text(const StepRecord& r, long start_step) {
  return fmt::format("step {}/{} | loss {:.4f} | ETA {}{} | {:.0f} tok/s{}", r.step, r.total_steps,
                     r.loss, run_eta(r, start_step),
                     r.val_loss ? fmt::format(" | val {:.4f}", *r.val_loss) : std::string(),
                     r.tokens_per_s, guard_note(r));
}
}  // namespace

std::string status_text(const StepRecord& r, long start_step) {
  return fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {:>7.0f} tok/s | ETA {}{}{}", r.step,
      r.total_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s, run_eta(r, start_step),
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

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The terminal's width in columns (80 when unknown): redrawn lines must not wrap, or moving the
// cursor up over them would miss rows.
std::size_t columns(std::FILE* out) {
  winsize w{};
  return ioctl(fileno(out), TIOCGWINSZ, &w) == 0 && w.ws_col > 0 ? w.ws_col : 80;
}
}  // namespace

GridProgress::GridProgress(std::FILE* out, std::size_t runs, std::function<double()> clock)
    : out_(out),
      tty_(isatty(fileno(out))),
      runs_(runs),
      clock_(clock ? std::move(clock) : std::function<double()>(now_s)),
      t0_(clock_()) {}

void GridProgress::plan(std::size_t i, std::string name, long from_step, long total_steps,
                        bool finished) {
  if (i >= runs_.size()) runs_.resize(i + 1);
  Run& r = runs_[i];
  r.name = std::move(name);
  r.from = r.step = std::min(from_step, total_steps);
  r.total = total_steps;
  r.ended = r.done = finished || from_step >= total_steps;
  r.active = false;
  r.line.clear();
}

void GridProgress::update(std::size_t i, const StepRecord& rec) {
  if (i >= runs_.size()) return;
  Run& r = runs_[i];
  if (r.ended) return;
  r.active = true;
  r.step = std::max(r.step, rec.step);
  // On a terminal the short form (lines must fit its width); in a log every field, as `train`.
  r.line = fmt::format("[{}] {}", r.name, tty_ ? compact_text(rec, r.from) : status_text(rec, r.from));
  if (!tty_) {
    fmt::print(out_, "{}\n", r.line);
    std::fflush(out_);
  } else if (rec.val_loss) {
    note(r.line);  // an evaluation stays on the screen, as train's status line keeps it
  } else {
    draw();
  }
}

void GridProgress::end(std::size_t i, bool finished) {
  if (i >= runs_.size() || runs_[i].ended) return;
  Run& r = runs_[i];
  r.ended = true;
  r.done = finished;
  r.active = false;
  if (tty_) {
    draw();
  } else {
    fmt::print(out_, "{}\n", grid_text());
    std::fflush(out_);
  }
}

void GridProgress::note(const std::string& line) {
  if (!tty_) {
    fmt::print(out_, "{}\n", line);
    std::fflush(out_);
    return;
  }
  erase();
  fmt::print(out_, "{}\n", line);
  draw();
}

void GridProgress::close() {
  if (!tty_) return;
  erase();
  fmt::print(out_, "{}\n", grid_text());
  std::fflush(out_);
}

std::string GridProgress::grid_text() const {
  long trained = 0, left = 0;
  std::size_t done = 0;
  for (const Run& r : runs_) {
    trained += r.step - r.from;
    if (!r.ended) left += std::max(0L, r.total - r.step);
    if (r.done) ++done;
  }
  const double elapsed = clock_() - t0_;
  std::string s = fmt::format("grid: {}/{} runs done | elapsed {}", done, runs_.size(), eta(elapsed));
  if (left > 0)
    s += " | ETA " + eta(trained > 0 ? elapsed / static_cast<double>(trained) * static_cast<double>(left) : -1);
  return s;
}

void GridProgress::erase() {
  if (drawn_ == 0) return;
  fmt::print(out_, "\r");
  if (drawn_ > 1) fmt::print(out_, "\033[{}A", drawn_ - 1);
  fmt::print(out_, "\033[J");
  drawn_ = 0;
}

void GridProgress::draw() {
  std::vector<std::string> lines;
  for (const Run& r : runs_)
    if (r.active && !r.line.empty()) lines.push_back(r.line);
  lines.push_back(grid_text());
  const std::size_t width = columns(out_) - 1;
  erase();
  for (std::size_t k = 0; k < lines.size(); ++k)
    fmt::print(out_, "{}{}", k ? "\n" : "", lines[k].substr(0, width));
  drawn_ = lines.size();
  std::fflush(out_);
}

}  // namespace normlab::cli
