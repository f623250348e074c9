// Hugging Face tokenizer.json (placeholder until the loader lands in this file).
#include "normlab/errors.h"
#include "normlab/tokenizer.h"

namespace normlab {
std::unique_ptr<Tokenizer> load_hf_tokenizer_json(std::string_view, const std::string& name) {
  throw FormatError("[tokenizer] " + name + ": tokenizer.json loading is not built yet");
}
}  // namespace normlab
