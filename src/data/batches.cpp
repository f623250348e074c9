// BatchSampler (random training windows, resumable, sharded across ranks) and EvalBatches (fixed,
// evenly spaced evaluation windows).
#include <fmt/format.h>

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

long EvalBatches::offset(long j) const {
  // o_j = floor(j * M / (W - 1)) with M = size - T - 1 (the last valid offset) and W windows,
  // computed as j * q + j * r / (W - 1) (M = q (W - 1) + r) so nothing overflows: j, r < W < 2^31.
  const long windows = static_cast<long>(n_) * B_;
  if (windows == 1) return 0;
  const long M = view_.size() - T_ - 1;
  const long q = M / (windows - 1), r = M % (windows - 1);
  return j * q + j * r / (windows - 1);
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

}  // namespace normlab
