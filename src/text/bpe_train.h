// Internal: byte-level BPE training with its statistics (the CLI prints them), and the GPT-2
// byte <-> character mapping of the ByteLevel pre-tokenizer. The public entry point is
// train_bpe_tokenizer_json() in normlab/tokenizer.h.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/tokenizer.h"

namespace normlab::text {

struct BpeTrainResult {
  std::string json;               // the tokenizer.json document
  int vocab_size = 0;             // tokens in the vocabulary, special tokens included
  int merges = 0;                 // merge rules (can exceed vocab_size - 256 - specials when two
                                  // merges spell the same string, as in the reference trainer)
  long long text_bytes = 0;       // bytes of training text (after add_prefix_space)
  long long text_tokens = 0;      // tokens of that text as segmented when training stopped
  long long distinct_words = 0;   // distinct pre-tokens
};

BpeTrainResult train_bpe(std::span<const std::string_view> texts, const BpeTrainOptions& options);

// GPT-2's regex split of text[begin, end) (begin at a match start), appended to `out`; and the
// offsets where the counting threads cut a long document ({0, ..., text.size()}). Exposed for the
// test that cutting changes no pre-token.
void gpt2_split(std::string_view text, std::size_t begin, std::size_t end,
                std::vector<std::string_view>& out);
std::vector<std::size_t> gpt2_chunk_boundaries(std::string_view text, std::size_t target);

// GPT-2's ByteLevel alphabet: byte b as the UTF-8 of one printable character (the printable
// bytes stand for themselves, the others for U+0100 + their rank among them).
const std::array<std::string, 256>& byte_level_chars();

}  // namespace normlab::text
