// Both ways a backward writes an input gradient (ops/accum.h), for the gradient checks of the ops
// that offer them: Accum::overwrite into a buffer full of junk (a kernel that reads it fails), and
// Accum::add from zero and onto a non-zero gradient (the check sees the result minus what was
// there). Parameter gradients accumulate: they start non-zero in every mode and the check sees
// what was added (a linear layer's dw can also be overwritten; its check starts it as junk).
#pragma once
#include <array>

#include "gradcheck.h"
#include "ops/accum.h"

namespace normlab::test {

struct AccumMode {
  ops::Accum accum;
  bool from_zero;  // Accum::add only: start from zero rather than from a non-zero gradient
  const char* name;
};

inline constexpr std::array<AccumMode, 3> kAccumModes = {{
    {ops::Accum::overwrite, false, "overwrite"},
    {ops::Accum::add, true, "add_to_zero"},
    {ops::Accum::add, false, "add_to_nonzero"},
}};

// Starting content of an input-gradient buffer of n elements: junk of size ~1e3 for overwrite,
// zero or a random gradient for add.
inline Vec input_grad_start(std::size_t n, const AccumMode& m, Rng& rng) {
  if (m.accum == ops::Accum::overwrite) return random_vec(n, rng, 1.0, 1e3);
  if (m.from_zero) return Vec(n, 0.0);
  return random_vec(n, rng, 2.0);
}

// Starting content of a parameter-gradient buffer: non-zero, except in add_to_zero.
inline Vec param_grad_start(std::size_t n, const AccumMode& m, Rng& rng) {
  return m.from_zero ? Vec(n, 0.0) : random_vec(n, rng, 2.0);
}

// What the backward contributed to a buffer that held `start`: the buffer itself after an
// overwrite, the difference after an add.
inline Vec contribution(const Vec& after, const Vec& start, bool overwritten) {
  Vec d(after.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = overwritten ? after[i] : after[i] - start[i];
  return d;
}

}  // namespace normlab::test
