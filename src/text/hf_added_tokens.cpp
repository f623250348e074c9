// tokenizer.json's added tokens: reading /added_tokens, each checked against the id the
// reference would give it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "text/hf_tokenizer_detail.h"
#include "text/utf8.h"

namespace normlab::text::hf {

void read_added_tokens(const Reader& r, const json* list, HfTokenizer& tok) {
  if (!list || list->is_null()) return;
  if (!list->is_array()) r.fail("/added_tokens", "expected an array");
  const int model_size = static_cast<int>(tok.bpe.id_to_token.size());
  int max_added = -1;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const std::string p = fmt::format("/added_tokens/{}", i);
    const json& e = r.object((*list)[i], p);
    auto t = std::make_unique<AddedToken>();
    t->content = r.string(e, p, "content");
    if (t->content.empty()) r.fail(p + "/content", "an empty added token is not supported");
    if (!text::is_valid_utf8(t->content)) r.fail(p + "/content", "not valid UTF-8");
    t->id = static_cast<int>(r.integer(e, p, "id", 0, static_cast<std::int64_t>(kMaxVocab) - 1));
    t->single_word = r.boolean(e, p, "single_word", false);
    t->lstrip = r.boolean(e, p, "lstrip", false);
    t->rstrip = r.boolean(e, p, "rstrip", false);
    t->normalized = r.boolean(e, p, "normalized", !r.boolean(e, p, "special", false));
    t->special = r.boolean(e, p, "special", false);
    for (const auto& other : tok.added)
      if (other->content == t->content)
        r.fail(p + "/content", fmt::format("\"{}\" is listed twice", t->content));
    // The reference gives a token in the model vocabulary that id, and any other the next id
    // after the model and the added tokens so far; a file that says otherwise is refused
    // rather than encoded differently from it.
    int expected;
    if (const auto it = tok.bpe.vocab.find(t->content); it != tok.bpe.vocab.end()) {
      expected = it->second;
    } else if (max_added < 0) {
      expected = model_size;
    } else {
      expected = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
    }
    if (t->id != expected)
      r.fail(p + "/id", fmt::format("id {} for \"{}\", but `tokenizers` would give it id {}",
                                    t->id, t->content, expected));
    max_added = std::max(max_added, t->id);
    tok.added.push_back(std::move(t));
  }
}

}  // namespace normlab::text::hf
