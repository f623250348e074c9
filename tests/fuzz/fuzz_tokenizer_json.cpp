// Fuzz target: the Hugging Face tokenizer.json loader and engine (src/text/hf_*.cpp).
//
// The input is a document, optionally followed by a NUL byte and a text. Properties: loading
// either succeeds or throws a normlab::Error (FormatError for the document); a loaded tokenizer
// encodes a few fixed texts and the fuzzer's text either to ids inside [0, vocab_size) or, for
// invalid UTF-8, with InputError; encoding twice gives the same ids (the word cache changes
// nothing); decode of those ids (and of a few arbitrary in-range ids) is valid UTF-8; and for a
// plain byte-level document (ByteLevel pre-tokenizer without prefix space, ByteLevel decoder,
// no normalizer, no added tokens, every byte character in the vocabulary) decode(encode(x)) == x.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_check.h"
#include "normlab/tokenizer.h"
#include "text/utf8.h"

using namespace normlab;

namespace {

std::string byte_char(int b) {
  static int table[256];
  static bool ready = false;
  if (!ready) {
    int shifted = 0;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE;
      table[i] = printable ? i : 256 + shifted++;
    }
    ready = true;
  }
  const int cp = table[b];
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

bool is_type(const nlohmann::json& doc, const char* key, const char* type) {
  const auto it = doc.find(key);
  return it != doc.end() && it->is_object() && it->value("type", "") == type;
}

// Whether the document is the plain byte-level kind for which decode(encode(x)) == x.
bool lossless(std::string_view document, const Tokenizer& tok) {
  const auto doc = nlohmann::json::parse(document, nullptr, false);
  if (!doc.is_object()) return false;
  if (doc.contains("normalizer") && !doc["normalizer"].is_null()) return false;
  if (!is_type(doc, "pre_tokenizer", "ByteLevel") || !is_type(doc, "decoder", "ByteLevel"))
    return false;
  const auto& pre = doc["pre_tokenizer"];
  if (!pre.contains("add_prefix_space") || pre["add_prefix_space"] != false) return false;
  if (doc.contains("added_tokens") && !doc["added_tokens"].empty()) return false;
  for (int b = 0; b < 256; ++b)
    if (!tok.token_to_id(byte_char(b))) return false;
  return true;
}

void check_text(const Tokenizer& tok, std::string_view text, bool round_trip) {
  std::vector<int> ids;
  if (!accepts([&] { ids = tok.encode(text, true); })) {
    FUZZ_CHECK(!text::is_valid_utf8(text));
    return;
  }
  for (const int id : ids) FUZZ_CHECK(id >= 0 && id < tok.vocab_size());
  FUZZ_CHECK(tok.encode(text, true) == ids);
  const std::vector<int> plain = tok.encode(text, false);
  FUZZ_CHECK(tok.encode(text, false) == plain);
  std::string decoded;
  FUZZ_CHECK(accepts([&] { decoded = tok.decode(ids, false); }));
  FUZZ_CHECK(text::is_valid_utf8(decoded));
  FUZZ_CHECK(accepts([&] { decoded = tok.decode(ids, true); }));
  FUZZ_CHECK(text::is_valid_utf8(decoded));
  FUZZ_CHECK(accepts([&] { tok.decode_bytes(plain, false); }));
  if (round_trip) FUZZ_CHECK(tok.decode_bytes(plain) == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view document = input.substr(0, nul);
  const std::string_view text =
      nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  std::unique_ptr<Tokenizer> tok;
  try {
    tok = load_hf_tokenizer_json(document, "fuzz.json");
  } catch (const FormatError&) {
    return 0;
  }
  // Anything else (InputError, InternalError, std::exception) escapes: a crash.
  FUZZ_CHECK(tok->vocab_size() > 0);
  const bool round_trip = lossless(document, *tok);
  for (const std::string_view t :
       {std::string_view("Hello world, it's 2024!  \t\n"), std::string_view(""),
        std::string_view("\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD e\xCC\x81"),
        std::string_view("<s>a</s> <|endoftext|>"), text})
    check_text(*tok, t, round_trip);
  // Arbitrary ids from the text's bytes: partial UTF-8 and broken <0xNN> runs.
  std::vector<int> ids;
  for (std::size_t i = 0; i + 1 < text.size() && ids.size() < 32; i += 2)
    ids.push_back((static_cast<unsigned char>(text[i]) << 8 |
                   static_cast<unsigned char>(text[i + 1])) %
                  tok->vocab_size());
  std::string decoded;
  FUZZ_CHECK(accepts([&] { decoded = tok->decode(ids, false); }));
  FUZZ_CHECK(text::is_valid_utf8(decoded));
  if (tok->vocab_size() <= 4096) FUZZ_CHECK(accepts([&] { tok->token_byte_lengths(); }));
  return 0;
}
