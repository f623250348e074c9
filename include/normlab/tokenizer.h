// Tokenizers: text <-> token ids. normlab's own byte-level tokenizer (token i is byte i), Hugging
// Face `tokenizer.json` files (BPE, byte-level as in GPT-2 / Llama 3 / OLMo 2 / Qwen 2, and
// SentencePiece-style with byte fallback as in Llama 2 / Gemma / Mistral), SentencePiece `.model`
// files (through libsentencepiece), and training a byte-level BPE that writes a tokenizer.json.
// load_tokenizer() picks the kind from what it is given; every loader refuses what it does not
// implement with the file and the JSON path of the component, never ignores it.
//
// Decoding has two forms: decode_bytes() returns the exact bytes the ids stand for (a byte-level
// BPE or a byte-fallback token may end inside a UTF-8 sequence), decode() returns text as the
// reference implementations do (each invalid UTF-8 sequence replaced by U+FFFD). DecodeStream
// turns a growing id sequence into text that is only ever emitted in whole UTF-8 characters.
#pragma once
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

// The special tokens a tokenizer declares (BOS/EOS from its post-processor template or its
// configuration; absent when it has none).
struct SpecialTokens {
  std::optional<int> bos, eos, pad, unk;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // 1 + the largest id encode() can return (the model vocabulary plus added tokens).
  virtual int vocab_size() const = 0;
  // One line for `info` and messages, e.g. "tokenizer.json BPE, byte-level, 50257 tokens".
  virtual std::string describe() const = 0;

  // Text -> ids. add_special applies the post-processor (BOS/EOS of a TemplateProcessing), as
  // the reference's encode(text, add_special_tokens=True); training corpora use false. Added
  // tokens are matched in the raw text before normalization, as the reference does.
  virtual std::vector<int> encode(std::string_view text, bool add_special = false) const = 0;
  // Many texts; equal to encoding each alone, spread over normlab's threads.
  virtual std::vector<std::vector<int>> encode_batch(std::span<const std::string_view> texts,
                                                     bool add_special = false) const;

  // ids -> the bytes they stand for. skip_special drops tokens flagged special. Throws
  // InputError for an id outside [0, vocab_size()).
  virtual std::string decode_bytes(std::span<const int> ids, bool skip_special = false) const = 0;
  // decode_bytes with every invalid UTF-8 sequence replaced by U+FFFD (the reference's text).
  // Virtual because a reference may replace differently: tokenizers' ByteFallback decoder turns
  // each byte of an invalid <0xNN> run into one U+FFFD.
  virtual std::string decode(std::span<const int> ids, bool skip_special = false) const;

  virtual std::optional<int> token_to_id(std::string_view token) const = 0;
  // The vocabulary entry's string (e.g. "Ġthe", "▁the", "<0x0A>"); throws InputError when out of
  // range.
  virtual std::string id_to_token(int id) const = 0;
  virtual SpecialTokens special() const { return {}; }
  // A byte-fallback token ("<0xNN>", as in Llama 2, Gemma, SentencePiece byte pieces): its text
  // depends on the tokens of its run (DecodeStream holds such runs until they end).
  virtual bool is_byte_fallback(int id) const;
  virtual bool is_special(int /*id*/) const { return false; }

  // For bits per byte: how many bytes of text each id stands for on its own (decode_bytes of
  // that id alone; 0 for special tokens). Size vocab_size().
  virtual std::vector<int> token_byte_lengths() const;
};

// Token i is byte i (vocabulary 256). Lossless for any byte string, UTF-8 or not.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kVocabSize = 256;
  int vocab_size() const override { return kVocabSize; }
  std::string describe() const override { return "bytes (256 tokens, one per byte)"; }
  std::vector<int> encode(std::string_view text, bool add_special = false) const override;
  std::string decode_bytes(std::span<const int> ids, bool skip_special = false) const override;
  std::optional<int> token_to_id(std::string_view token) const override;
  std::string id_to_token(int id) const override;
  std::vector<int> token_byte_lengths() const override;
};

// What data.tokenizer names: "bytes" (or empty) -> ByteTokenizer; a file whose content is JSON
// -> a Hugging Face tokenizer.json; otherwise a SentencePiece .model. Throws FormatError naming
// the file (and the JSON path of a refused component) when it cannot be loaded.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);
// The Hugging Face tokenizer.json in `json` (file name `name` for messages).
std::unique_ptr<Tokenizer> load_hf_tokenizer_json(std::string_view json, const std::string& name);
// A SentencePiece model (serialized ModelProto) in `bytes`.
std::unique_ptr<Tokenizer> load_sentencepiece(std::string_view bytes, const std::string& name);

// Incremental decoding for streaming generation: push() each new id and print what it returns.
// Text comes out only in whole UTF-8 characters: bytes of a character split across tokens are
// held back until it is complete, and so is a run of byte-fallback tokens until another token
// ends it; finish() returns what is left (invalid bytes as U+FFFD). The concatenation of all
// returns equals tok.decode(all ids, skip_special).
class DecodeStream {
 public:
  explicit DecodeStream(const Tokenizer& tok, bool skip_special = true);
  std::string push(int id);
  std::string finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::vector<int> ids_;
  std::size_t prefix_ = 0;   // ids_[prefix_, read_) were decoded to the text already emitted
  std::size_t read_ = 0;     // (a few ids of context, so SentencePiece's leading-space rules hold)
};

// Byte-level BPE training (GPT-2 pre-tokenization: its regex split + ByteLevel, no normalizer).
struct BpeTrainOptions {
  int vocab_size = 8192;                    // the 256 bytes + merges + special tokens
  std::vector<std::string> special_tokens;  // added first, ids 0.. in order, flagged special
  int min_frequency = 2;                    // a pair seen fewer times is never merged
  bool add_prefix_space = false;
};
// Trains on `texts` (documents; no merge crosses two) and returns a tokenizer.json document that
// normlab and the `tokenizers` Python package load and encode identically.
std::string train_bpe_tokenizer_json(std::span<const std::string_view> texts,
                                     const BpeTrainOptions& options);

}  // namespace normlab
