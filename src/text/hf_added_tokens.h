// Internal (tokenizer.json): added tokens (the special tokens and the like) and the matcher that
// cuts them out of the text before the model sees the rest, as the reference's AddedVocabulary
// does (leftmost-longest, with single_word, lstrip and rstrip).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/hf_unicode.h"

namespace normlab::text::hf {

struct AddedToken {
  int id = 0;
  std::string content;
  std::string text;  // what decode and id_to_token give: content, normalized when normalized=true
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Leftmost-longest matching over a set of strings (the reference uses Aho-Corasick with that
// match kind); buckets by first byte, longest first.
class AddedMatcher {
 public:
  void add(std::string pattern, const AddedToken* tok) {
    if (pattern.empty()) return;
    auto& bucket = buckets_[static_cast<unsigned char>(pattern[0])];
    bucket.push_back({std::move(pattern), tok});
    std::stable_sort(bucket.begin(), bucket.end(), [](const Entry& a, const Entry& b) {
      return a.pattern.size() > b.pattern.size();
    });
    any_ = true;
  }
  bool empty() const { return !any_; }

  // Calls piece(begin, end) for text between tokens and token(tok) for each token, as the
  // reference's AddedVocabulary::find_matches (single_word, lstrip, rstrip included).
  template <class Piece, class Tok>
  void split(std::string_view s, Piece&& piece, Tok&& token) const {
    if (!any_) {
      if (!s.empty()) piece(0, s.size());
      return;
    }
    std::size_t start_offset = 0;
    for (std::size_t pos = 0; pos < s.size();) {
      const Entry* hit = nullptr;
      std::size_t at = pos;
      for (; at < s.size() && !hit; ++at) {
        for (const Entry& e : buckets_[static_cast<unsigned char>(s[at])])
          if (s.compare(at, e.pattern.size(), e.pattern) == 0) {
            hit = &e;
            break;
          }
        if (hit) break;
      }
      if (!hit) break;
      std::size_t start = at, stop = at + hit->pattern.size();
      pos = stop;  // the automaton resumes after the match, whatever is decided below
      const AddedToken& t = *hit->token;
      if (t.single_word) {
        const bool space_before = start == 0 || !is_word_char(decode_before(s, start));
        bool space_after = stop == s.size();
        if (!space_after) {
          std::int32_t cp = 0;
          decode_at(s, stop, &cp);
          space_after = !is_word_char(cp);
        }
        if (!space_before || !space_after) continue;
      }
      if (t.lstrip) {
        std::size_t b = start;
        while (b > 0 && is_white_space(decode_before(s, b))) {
          std::size_t k = b - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          b = k;
        }
        start = std::max(b, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          std::int32_t cp = 0;
          const std::size_t n = decode_at(s, stop, &cp);
          if (!is_white_space(cp)) break;
          stop += n;
        }
      }
      if (start_offset < start) piece(start_offset, start);
      token(t);
      start_offset = stop;
    }
    if (start_offset < s.size()) piece(start_offset, s.size());
  }

 private:
  struct Entry {
    std::string pattern;
    const AddedToken* token;
  };
  std::array<std::vector<Entry>, 256> buckets_;
  bool any_ = false;
};

}  // namespace normlab::text::hf
