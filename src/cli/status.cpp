#include "cli/status.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

#include <fmt/format.h>

namespace normlab::cli {

namespace {
std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

std::string eta(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const long t = static_cast<long>(s);
  return t >= 3600 ? fmt::format("{}h{:02d}m", t / 3600, static_cast<int>(t % 3600 / 60))
                   : fmt::format("{}m{:02d}s", t / 60, static_cast<int>(t % 60));
}
}  // namespace

void install_stop_signals() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}
bool stop_signal_received() { return g_stop.load(); }

StatusLine::StatusLine(std::FILE* out) : out_(out), tty_(isatty(fileno(out))) {}

void StatusLine::update(const StepRecord& r) {
  const double per_step = r.step > 0 ? r.elapsed_s / r.step : 0;
  std::string line = fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {:>7.0f} tok/s | ETA {}{}{}", r.step,
      r.total_steps, r.loss, r.lr, r.grad_norm, r.tokens_per_s, eta(per_step * (r.total_steps - r.step)),
      r.val_loss ? fmt::format(" | val {:.4f}", *r.val_loss) : std::string(),
      !r.skipped ? "" : r.nonfinite ? " | SKIPPED (non-finite)" : " | SKIPPED (spike)");
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
