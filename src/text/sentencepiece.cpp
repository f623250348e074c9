// SentencePiece .model files (placeholder until the loader lands in this file).
#include "normlab/errors.h"
#include "normlab/tokenizer.h"

namespace normlab {
std::unique_ptr<Tokenizer> load_sentencepiece(std::string_view, const std::string& name) {
  throw FormatError("[tokenizer] " + name + ": SentencePiece loading is not built yet");
}
}  // namespace normlab
