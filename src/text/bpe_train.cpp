// Byte-level BPE training (placeholder until the trainer lands in this file).
#include "normlab/errors.h"
#include "normlab/tokenizer.h"

namespace normlab {
std::string train_bpe_tokenizer_json(std::span<const std::string_view>, const BpeTrainOptions&) {
  throw InputError("[tokenizer] BPE training is not built yet");
}
}  // namespace normlab
