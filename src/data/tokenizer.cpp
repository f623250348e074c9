// Byte-level tokenizer: the identity between bytes and token ids 0..255.
#include <fmt/format.h>

#include "normlab/data.h"
#include "normlab/errors.h"

namespace normlab {

std::vector<int> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const int> tokens) const {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int t = tokens[i];
    if (t < 0 || t >= kVocabSize)
      throw InputError(fmt::format(
          "[tokenizer] token {} at index {} is outside the byte vocabulary [0, {})", t, i,
          kVocabSize));
    text[i] = static_cast<char>(static_cast<unsigned char>(t));
  }
  return text;
}

}  // namespace normlab
