// Internal: the regular expressions of tokenizer.json files (pre-tokenizer Split patterns, the
// GPT-2 ByteLevel pattern, Replace patterns), compiled with PCRE2 in UTF + Unicode-property mode
// with JIT. Matches are enumerated as the reference's Oniguruma-based find_iter does: leftmost
// first, non-overlapping, and an empty match right where the previous match ended is skipped.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace normlab::text {

class Regex {
 public:
  // Throws std::invalid_argument with PCRE2's message and offset when the pattern is invalid.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls f(begin, end) for each match in s, in order. s may be ill-formed UTF-8 (it is matched
  // with PCRE2_MATCH_INVALID_UTF). Thread-safe. Throws InputError if PCRE2 gives up (resource
  // limits), never returns a partial answer silently.
  template <class F>
  void for_each_match(std::string_view s, F&& f) const {
    std::size_t pos = 0, last_end = static_cast<std::size_t>(-1);
    std::size_t b = 0, e = 0;
    while (pos <= s.size() && find(s, pos, &b, &e)) {
      if (b == e && e == last_end) {  // empty match glued to the previous one: step one character
        if (b >= s.size()) break;
        pos = b + char_len(s, b);
        continue;
      }
      f(b, e);
      last_end = e;
      pos = e;  // after an empty match the rule above moves the next search on
    }
  }

  // The [begin, end) matches of find_iter (see for_each_match).
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view s) const;

 private:
  bool find(std::string_view s, std::size_t start, std::size_t* b, std::size_t* e) const;
  static std::size_t char_len(std::string_view s, std::size_t i);
  pcre2_real_code_8* code_ = nullptr;
};

}  // namespace normlab::text
