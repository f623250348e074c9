// Evaluation helpers shared by the trainer and `eval` (the checkpoint evaluation itself is
// normlab/evaluate.h).
#pragma once

namespace normlab {

class EvalBatches;
class ExactEvalBatches;
class Tokenizer;

// Bytes of text per target token over all windows of `ev` (each token counted with
// tok.token_byte_lengths()): bits per byte = mean loss / ln 2 / this. 1 for the byte tokenizer.
double eval_bytes_per_token(EvalBatches ev, const Tokenizer& tok);
// The same over every target of an exact evaluation.
double eval_bytes_per_token(ExactEvalBatches ev, const Tokenizer& tok);

}  // namespace normlab
