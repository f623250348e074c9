// How a backward writes the gradient of an op's input (dx), the one convention of every op that
// offers both: Accum::add adds into it (dx += ...), so that several consumers of one tensor sum
// their contributions; Accum::overwrite replaces it (dx = ...), which saves zero-filling a buffer
// that receives exactly one contribution. Parameter gradients (dw, db) accumulate, as in llm.c:
// every use and every micro-batch adds into one gradient arena, zeroed once per step. The zeroing
// is lazy (Transformer::zero_grad): the first contribution to a linear layer's weight gradient
// after it overwrites (linear_backward's dw_accum), and any other first one adds to a gradient the
// model zero-fills just before.
// Ops with a single behaviour (softcap, cross-entropy, the tiled attention: overwrite; the
// reference attention, embedding: accumulate) state it above their backward instead.
#pragma once

namespace normlab::ops {

enum class Accum { add, overwrite };

}  // namespace normlab::ops
