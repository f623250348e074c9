// Internal (tokenizer.json): HfTokenizer, the Tokenizer that load_hf_tokenizer_json builds, and
// the readers of the document's parts that fill it. Its members are defined beside the stage they
// run: encoding and the loader in hf_tokenizer.cpp, pre_tokenize in hf_pre_tokenizer.cpp,
// run_decoder in hf_decoder.cpp.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "text/hf_added_tokens.h"
#include "text/hf_bpe.h"
#include "text/hf_json.h"
#include "text/hf_pipeline.h"

namespace normlab::text::hf {

class HfTokenizer final : public Tokenizer {
 public:
  Bpe bpe;
  std::vector<NormStep> normalizer;
  std::vector<PreStep> pre;
  bool raw_words = false;  // the last pre-tokenizer is ByteLevel: words reach BPE as raw bytes
  std::vector<DecStep> decoder;
  bool has_decoder = false;
  std::vector<Template> templates;
  std::vector<std::unique_ptr<AddedToken>> added;
  std::vector<const AddedToken*> added_by_id;  // size vocab_size, null for model tokens
  AddedMatcher raw_matcher, normalized_matcher;
  int size = 0;
  std::string description;
  SpecialTokens specials;

  int vocab_size() const override { return size; }
  std::string describe() const override { return description; }

  std::vector<int> encode(std::string_view text, bool add_special) const override;

  std::string decode_bytes(std::span<const int> ids, bool skip_special) const override {
    return run_decoder(ids, skip_special, Mode::kExact);
  }
  std::string decode(std::span<const int> ids, bool skip_special) const override {
    return run_decoder(ids, skip_special, Mode::kReference);
  }

  std::optional<int> token_to_id(std::string_view token) const override;
  std::string id_to_token(int id) const override {
    check_id(id, 0);
    return token_string(id);
  }
  SpecialTokens special() const override { return specials; }
  bool is_special(int id) const override {
    return id >= 0 && id < size && added_by_id[id] && added_by_id[id]->special;
  }
  // The bytes each token adds in running text: decoded alone, but as a token in the middle
  // (Strip and Metaspace's first-token rule do not apply).
  std::vector<int> token_byte_lengths() const override;

 private:
  enum class Mode { kExact, kReference, kInContext };

  const std::string& token_string(int id) const {
    return added_by_id[id] ? added_by_id[id]->text : bpe.id_to_token[id];
  }
  void check_id(int id, std::size_t index) const {
    if (id < 0 || id >= size)
      throw InputError(fmt::format("[tokenizer] token {} at index {} is outside the vocabulary "
                                   "[0, {})", id, index, size));
  }

  void encode_normalized(std::string_view s, bool at_origin, std::vector<int>& out) const;

  // Runs pre-tokenizer step i on one non-empty piece; the pieces it makes go to step i + 1 and,
  // past the last step, to BPE.
  void pre_tokenize(std::size_t i, std::string_view piece, bool origin,
                    std::vector<int>& out) const;
  void split_and_continue(std::size_t i, std::string_view s, bool origin, std::vector<Span>& sp,
                          Behavior behavior, std::vector<int>& out) const;

  std::string run_decoder(std::span<const int> ids, bool skip_special, Mode mode) const;
  static void apply_decoder(const DecStep& st, std::vector<std::string>& toks, Mode mode);
};

// The readers of the parts that fill a tokenizer (the pipeline stages' are in hf_pipeline.h):
// /model in hf_bpe.cpp, /added_tokens in hf_added_tokens.cpp.
void read_model(const Reader& r, const json& m, HfTokenizer& tok);
void read_added_tokens(const Reader& r, const json* list, HfTokenizer& tok);

}  // namespace normlab::text::hf
