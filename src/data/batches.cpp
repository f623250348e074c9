// BatchSampler (random training windows, resumable, sharded across ranks), EvalBatches (fixed,
// evenly spaced evaluation windows) and ExactEvalBatches (every token scored once).
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "normlab/data.h"
#include "normlab/errors.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

void check_batch_args(const CorpusView& view, int B, int T, int rank, int world, const char* who) {
  if (B < 1 || T < 1)
    throw InputError(fmt::format("[{}] batch size B = {} and sequence length T = {} must be >= 1",
                                 who, B, T));
  if (world < 1 || rank < 0 || rank >= world)
    throw InputError(fmt::format("[{}] rank {} is outside [0, world = {})", who, rank, world));
  if (B % world != 0)
    throw InputError(fmt::format(
        "[{}] global batch size B = {} is not divisible by the number of ranks {}", who, B, world));
  if (view.size() < static_cast<long>(T) + 1)
    throw InputError(fmt::format(
        "[{}] {}: {} tokens, too few for one window of T + 1 = {} tokens (inputs and the shifted "
        "target)",
        who, view.name(), view.size(), static_cast<long>(T) + 1));
}

// Row r of (idx, targets): tokens [o, o + T) and [o + 1, o + T + 1).
void fill_row(const CorpusView& view, long o, int T, int* idx, int* targets) {
  view.copy(o, T, idx);
  view.copy(o + 1, T, targets);
}

}  // namespace

// --- BatchSampler -----------------------------------------------------------------------------

BatchSampler::BatchSampler(CorpusView view, int B, int T, std::uint64_t seed, int rank, int world)
    : view_(std::move(view)),
      B_(B),
      T_(T),
      rank_(rank),
      world_(world),
      rng_state_(Rng(seed).state()) {
  check_batch_args(view_, B, T, rank, world, "batch sampler");
}

void BatchSampler::next(int* idx, int* targets) {
  // One global draw of B offsets; this rank keeps rows [first, first + local).
  Rng rng;
  rng.set_state(rng_state_);
  const int local = B_ / world_;
  const int first = rank_ * local;
  const auto n_offsets = static_cast<std::uint64_t>(view_.size() - T_);  // offsets 0 .. size-T-1
  for (int g = 0; g < B_; ++g) {
    const long o = static_cast<long>(rng.below(n_offsets));
    const int r = g - first;
    if (r >= 0 && r < local)
      fill_row(view_, o, T_, idx + static_cast<long>(r) * T_, targets + static_cast<long>(r) * T_);
  }
  rng_state_ = rng.state();
  ++batches_drawn_;
}

// --- EvalBatches ------------------------------------------------------------------------------

EvalBatches::EvalBatches(CorpusView view, int B, int T, int n, int rank, int world)
    : view_(std::move(view)), B_(B), T_(T), n_(n), rank_(rank), world_(world) {
  check_batch_args(view_, B, T, rank, world, "eval batches");
  if (n < 1) throw InputError(fmt::format("[eval batches] number of batches {} must be >= 1", n));
  if (static_cast<long>(n) * B > std::numeric_limits<int>::max())
    throw InputError(fmt::format("[eval batches] {} batches of {} rows: too many windows", n, B));
}

long eval_window_offset(long size, int T, long windows, long j) {
  // o_j = floor(j * M / (W - 1)) with M = size - T - 1 (the last valid offset) and W windows,
  // computed as j * q + j * r / (W - 1) (M = q (W - 1) + r) so nothing overflows: j, r < W < 2^31.
  if (windows == 1) return 0;
  const long M = size - T - 1;
  const long q = M / (windows - 1), r = M % (windows - 1);
  return j * q + j * r / (windows - 1);
}

EvalCoverage eval_coverage(long size, int B, int T, int n) {
  if (B < 1 || T < 1 || n < 1)
    throw InputError(fmt::format("[eval batches] B = {}, T = {} and the number of batches {} must "
                                 "be >= 1", B, T, n));
  if (size < static_cast<long>(T) + 1)
    throw InputError(fmt::format("[eval batches] {} tokens, too few for one window of T + 1 = {} "
                                 "tokens", size, static_cast<long>(T) + 1));
  EvalCoverage c;
  c.windows = static_cast<long>(n) * B;
  c.targets = c.windows * T;
  // Offsets ascend: window j's targets [o_j + 1, o_j + T] add those before window j + 1's.
  for (long j = 0; j < c.windows; ++j) {
    const long o = eval_window_offset(size, T, c.windows, j);
    const long next = j + 1 < c.windows ? eval_window_offset(size, T, c.windows, j + 1) : size;
    c.distinct += std::min<long>(T, next - o);
  }
  return c;
}

long EvalBatches::offset(long j) const {
  return eval_window_offset(view_.size(), T_, static_cast<long>(n_) * B_, j);
}

void EvalBatches::fill(int k, int* idx, int* targets) const {
  NL_CHECK(k >= 0 && k < n_, "eval batch {} outside [0, {})", k, n_);
  const int local = B_ / world_;
  for (int r = 0; r < local; ++r) {
    const long j = static_cast<long>(k) * B_ + static_cast<long>(rank_) * local + r;
    fill_row(view_, offset(j), T_, idx + static_cast<long>(r) * T_,
             targets + static_cast<long>(r) * T_);
  }
}

bool EvalBatches::next(int* idx, int* targets) {
  if (cursor_ >= n_) return false;
  fill(cursor_++, idx, targets);
  return true;
}

// --- ExactEvalBatches -------------------------------------------------------------------------

ExactEvalBatches::ExactEvalBatches(CorpusView view, int B, int T)
    : view_(std::move(view)), B_(B), T_(T) {
  if (B < 1 || T < 1)
    throw InputError(fmt::format(
        "[exact eval] batch size B = {} and sequence length T = {} must be >= 1", B, T));
  if (view_.size() < 2)
    throw InputError(fmt::format("[exact eval] {}: {} token{}, too few for one target (the first "
                                 "token is only context)",
                                 view_.name(), view_.size(), view_.size() == 1 ? "" : "s"));
}

long ExactEvalBatches::num_blocks() const {
  const long full = num_targets() / T_;  // windows of T
  return (full + B_ - 1) / B_ + (num_targets() % T_ != 0 ? 1 : 0);
}

EvalBlock ExactEvalBatches::block(long k) const {
  NL_CHECK(k >= 0 && k < num_blocks(), "exact eval block {} outside [0, {})", k, num_blocks());
  const long full = num_targets() / T_;
  const long full_blocks = (full + B_ - 1) / B_;
  if (k < full_blocks)
    return {static_cast<int>(std::min<long>(B_, full - k * B_)), T_, k * B_};
  return {1, static_cast<int>(num_targets() % T_), full};  // the short last window
}

EvalBlock ExactEvalBatches::fill(long k, int* idx, int* targets) const {
  const EvalBlock b = block(k);
  for (int r = 0; r < b.rows; ++r) {
    const long o = (b.first_window + r) * T_;
    view_.copy(o, b.len, idx + static_cast<long>(r) * b.len);
    view_.copy(o + 1, b.len, targets + static_cast<long>(r) * b.len);
  }
  return b;
}

bool ExactEvalBatches::next(EvalBlock& b, int* idx, int* targets) {
  if (cursor_ >= num_blocks()) return false;
  b = fill(cursor_++, idx, targets);
  return true;
}

}  // namespace normlab
