// Byte-level BPE training, GPT-2 style: documents are split by GPT-2's pre-tokenizer regex
// (PCRE2, UTF + Unicode properties, JIT), distinct pre-tokens are counted on all threads, and
// merges are chosen one at a time from a priority queue of pair counts that is updated
// incrementally (only the words holding the merged pair are touched) with lazy invalidation
// (a popped entry whose count is stale is dropped). The result is a tokenizer.json in the
// format of the `tokenizers` package.
//
// Ids: special tokens 0..S-1, then the 256 byte symbols ordered by their ByteLevel character's
// code point, then merged tokens in merge order; this is the layout of tokenizers' BpeTrainer.
// The next merge is the pair with the highest count; among equal counts the pair (left id,
// right id) that is smallest lexicographically, which is also the reference trainer's rule.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/bpe_train.h"

#include <pcre2.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <queue>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "normlab/errors.h"
#include "tensor/threading.h"
#include "text/utf8.h"

namespace normlab {
namespace text {
namespace {

// GPT-2's pre-tokenizer pattern (tokenizers' ByteLevel with use_regex=true).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The GPT-2 pattern compiled once, matched by split_gpt2 with a subject cut at a chunk boundary
// and no UTF check (the documents were checked on reading): text::Regex (regex.h) matches whole
// strings with invalid-UTF-8 handling, which the counting threads do not need.
struct Gpt2Pattern {
  pcre2_code* code = nullptr;
  Gpt2Pattern() {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern.data()), kGpt2Pattern.size(),
                         PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    NL_CHECK(code != nullptr, "GPT-2 pattern does not compile (error {} at {})", err, off);
    // Without JIT (a platform lacking it) matching still works, only slower.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~Gpt2Pattern() { pcre2_code_free(code); }
  Gpt2Pattern(const Gpt2Pattern&) = delete;
  Gpt2Pattern& operator=(const Gpt2Pattern&) = delete;
};

// Calls f(piece) for each pre-token of text[begin, end) (begin must be where a match starts).
template <class F>
void split_gpt2(const Gpt2Pattern& re, pcre2_match_data* md, std::string_view text, std::size_t begin,
                std::size_t end, F&& f) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = begin;
  while (at < end) {
    // The subject ends at `end`, a chunk boundary (see chunk_boundaries() for why that is safe).
    const int rc = pcre2_match(re.code, subject, end, at, PCRE2_NO_UTF_CHECK, md, nullptr);
    NL_CHECK(rc > 0, "GPT-2 pattern found no match at offset {} (pcre2 {})", at, rc);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    NL_CHECK(ov[0] == at && ov[1] > ov[0], "GPT-2 pattern skipped text at offset {}", at);
    f(text.substr(ov[0], ov[1] - ov[0]));
    at = ov[1];
  }
}

// Splits a long document for the counting threads at offsets p where the sequential scan ends a
// match and the cut subject matches the same: text[p-2] printable ASCII, text[p-1] '\n', text[p]
// printable ASCII. The lone '\n' is one pre-token either way (on the whole text \s+(?!\S) fails
// before text[p] and \s+ takes it; at the end of a cut subject \s+(?!\S) takes it), no
// alternative carries a match across it, and the pattern looks at nothing before its start.
std::vector<std::size_t> chunk_boundaries(std::string_view text, std::size_t target) {
  const auto ascii_graphic = [&](std::size_t i) {
    const auto c = static_cast<unsigned char>(text[i]);
    return c > 0x20 && c < 0x7F;
  };
  std::vector<std::size_t> cuts{0};
  for (std::size_t p = text.find('\n', target); p != std::string_view::npos;
       p = text.find('\n', p + 1)) {
    if (p < 1 || p + 1 >= text.size() || !ascii_graphic(p - 1) || !ascii_graphic(p + 1)) continue;
    if (p + 1 - cuts.back() < target) continue;
    cuts.push_back(p + 1);
  }
  cuts.push_back(text.size());
  return cuts;
}

struct Piece {
  const std::string_view* doc;
  std::size_t begin, end;
};

std::string json_string(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

using PairKey = std::uint64_t;
inline PairKey pair_key(std::uint32_t a, std::uint32_t b) {
  return (static_cast<PairKey>(a) << 32) | b;
}

struct HeapEntry {
  long long count;
  PairKey pair;
  // std::priority_queue pops the largest: higher count first, then the smaller (left, right).
  bool operator<(const HeapEntry& o) const {
    return count != o.count ? count < o.count : pair > o.pair;
  }
};

}  // namespace

void gpt2_split(std::string_view text, std::size_t begin, std::size_t end,
                std::vector<std::string_view>& out) {
  static const Gpt2Pattern re;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
  try {
    split_gpt2(re, md, text, begin, end, [&](std::string_view w) { out.push_back(w); });
  } catch (...) {
    pcre2_match_data_free(md);
    throw;
  }
  pcre2_match_data_free(md);
}

std::vector<std::size_t> gpt2_chunk_boundaries(std::string_view text, std::size_t target) {
  return chunk_boundaries(text, target);
}

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> t;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const int cp = printable ? b : 256 + extra++;
      std::string u;
      if (cp < 0x80) {
        u += static_cast<char>(cp);
      } else {  // cp < 0x800: two bytes
        u += static_cast<char>(0xC0 | (cp >> 6));
        u += static_cast<char>(0x80 | (cp & 0x3F));
      }
      t[b] = u;
    }
    return t;
  }();
  return chars;
}

BpeTrainResult train_bpe(std::span<const std::string_view> texts, const BpeTrainOptions& opt) {
  const int n_special = static_cast<int>(opt.special_tokens.size());
  if (opt.vocab_size < 256 + n_special)
    throw InputError(fmt::format(
        "[tokenizer] vocab_size {} is smaller than the 256 byte symbols plus {} special "
        "token{} ({})", opt.vocab_size, n_special, n_special == 1 ? "" : "s", 256 + n_special));
  if (opt.min_frequency < 1)
    throw InputError(fmt::format("[tokenizer] min_frequency must be >= 1, not {}",
                                 opt.min_frequency));

  // --- the vocabulary's first part: special tokens, then the bytes by code point ------------
  const auto& chars = byte_level_chars();
  std::vector<std::string> token;  // id -> vocabulary string
  std::unordered_map<std::string, std::uint32_t> token_id;
  for (int i = 0; i < n_special; ++i) {
    const std::string& s = opt.special_tokens[i];
    if (s.empty() || !is_valid_utf8(s))
      throw InputError(fmt::format("[tokenizer] special token {} is {}", i,
                                   s.empty() ? "empty" : "not valid UTF-8"));
    if (!token_id.emplace(s, static_cast<std::uint32_t>(token.size())).second)
      throw InputError(fmt::format("[tokenizer] special token '{}' is given twice", s));
    token.push_back(s);
  }
  std::array<int, 256> order{};
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](int x, int y) { return chars[x] < chars[y]; });
  std::array<std::uint32_t, 256> byte_id{};
  for (const int b : order) {
    if (!token_id.emplace(chars[b], static_cast<std::uint32_t>(token.size())).second)
      throw InputError(fmt::format(
          "[tokenizer] special token '{}' is also a byte symbol of the ByteLevel alphabet",
          chars[b]));
    byte_id[b] = static_cast<std::uint32_t>(token.size());
    token.push_back(chars[b]);
  }

  // --- documents (with the prefix space) and the pieces the threads count -------------------
  std::vector<std::string> prefixed;
  std::vector<std::string_view> docs;
  long long text_bytes = 0;
  for (std::size_t d = 0; d < texts.size(); ++d) {
    const std::string_view t = texts[d];
    if (t.empty()) continue;
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t n = utf8_sequence(t, i);
      if (!n)
        throw InputError(fmt::format(
            "[tokenizer] training text {} is not valid UTF-8 at byte offset {}", d, i));
      i += n;
    }
    if (opt.add_prefix_space && t.front() != ' ') prefixed.push_back(" " + std::string(t));
  }
  {
    std::size_t k = 0;
    for (const std::string_view t : texts) {
      if (t.empty()) continue;
      if (opt.add_prefix_space && t.front() != ' ') docs.push_back(prefixed[k++]);
      else docs.push_back(t);
      text_bytes += static_cast<long long>(docs.back().size());
    }
  }
  if (text_bytes == 0) throw InputError("[tokenizer] the training corpus is empty (no text)");

  std::vector<Piece> pieces;
  for (const auto& d : docs) {
    const auto cuts = chunk_boundaries(d, 256 * 1024);
    for (std::size_t c = 0; c + 1 < cuts.size(); ++c) pieces.push_back({&d, cuts[c], cuts[c + 1]});
  }

  // --- count distinct pre-tokens: one map per thread, merged afterwards ---------------------
  const Gpt2Pattern re;
  using Counts = std::unordered_map<std::string_view, long long>;
  const int nth = thread_count();
  std::vector<Counts> local(static_cast<std::size_t>(nth));
  std::atomic<std::size_t> next{0};
  parallel_team([&](int tid, int) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re.code, nullptr);
    Counts& counts = local[static_cast<std::size_t>(tid)];
    for (std::size_t p; (p = next.fetch_add(1)) < pieces.size();) {
      const Piece& pc = pieces[p];
      split_gpt2(re, md, *pc.doc, pc.begin, pc.end, [&](std::string_view w) { ++counts[w]; });
    }
    pcre2_match_data_free(md);
  });
  Counts all = std::move(local[0]);
  for (std::size_t t = 1; t < local.size(); ++t)
    for (const auto& [w, c] : local[t]) all[w] += c;
  local.clear();

  // Words in a fixed order (by their bytes), so that nothing below depends on hash order.
  std::vector<std::pair<std::string_view, long long>> sorted(all.begin(), all.end());
  all.clear();
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<std::uint32_t>> words(sorted.size());
  std::vector<long long> freq(sorted.size());
  for (std::size_t w = 0; w < sorted.size(); ++w) {
    freq[w] = sorted[w].second;
    for (const char ch : sorted[w].first) words[w].push_back(byte_id[static_cast<unsigned char>(ch)]);
  }

  // --- pair counts, the pair -> words index, the queue -------------------------------------
  std::unordered_map<PairKey, long long> pair_count;
  std::unordered_map<PairKey, std::vector<std::uint32_t>> where;
  pair_count.reserve(1 << 16);
  where.reserve(1 << 16);
  for (std::size_t w = 0; w < words.size(); ++w) {
    const auto& s = words[w];
    for (std::size_t i = 0; i + 1 < s.size(); ++i) {
      const PairKey k = pair_key(s[i], s[i + 1]);
      pair_count[k] += freq[w];
      auto& list = where[k];
      if (list.empty() || list.back() != w) list.push_back(static_cast<std::uint32_t>(w));
    }
  }
  std::priority_queue<HeapEntry> queue;
  for (const auto& [k, c] : pair_count) queue.push({c, k});

  // --- merges -------------------------------------------------------------------------------
  std::vector<std::pair<std::uint32_t, std::uint32_t>> merges;
  std::unordered_map<PairKey, long long> delta;
  std::vector<std::uint32_t> merged;
  while (static_cast<int>(token.size()) < opt.vocab_size && !queue.empty()) {
    const HeapEntry top = queue.top();
    queue.pop();
    const auto it = pair_count.find(top.pair);
    if (it == pair_count.end() || it->second != top.count) continue;  // stale entry
    if (top.count < opt.min_frequency) break;
    const auto a = static_cast<std::uint32_t>(top.pair >> 32);
    const auto b = static_cast<std::uint32_t>(top.pair & 0xFFFFFFFFu);
    std::string spelled = token[a] + token[b];
    std::uint32_t c;
    if (const auto found = token_id.find(spelled); found != token_id.end()) {
      c = found->second;  // two merges can spell one string; it keeps its first id
    } else {
      c = static_cast<std::uint32_t>(token.size());
      token_id.emplace(spelled, c);
      token.push_back(std::move(spelled));
    }
    merges.emplace_back(a, b);

    std::vector<std::uint32_t> holders = std::move(where[top.pair]);
    where.erase(top.pair);
    pair_count.erase(it);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    delta.clear();
    for (const std::uint32_t w : holders) {
      auto& s = words[w];
      merged.clear();
      for (std::size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          merged.push_back(c);
          i += 2;
        } else {
          merged.push_back(s[i++]);
        }
      }
      if (merged.size() == s.size()) continue;  // an index entry left over from an earlier merge
      const long long f = freq[w];
      for (std::size_t i = 0; i + 1 < s.size(); ++i) delta[pair_key(s[i], s[i + 1])] -= f;
      for (std::size_t i = 0; i + 1 < merged.size(); ++i) {
        const PairKey k = pair_key(merged[i], merged[i + 1]);
        delta[k] += f;
        if (merged[i] == c || merged[i + 1] == c) {
          auto& list = where[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
      s.swap(merged);
    }
    for (const auto& [k, d] : delta) {
      if (d == 0 || k == top.pair) continue;
      auto& cnt = pair_count[k];
      cnt += d;
      if (cnt <= 0) pair_count.erase(k);
      else queue.push({cnt, k});
    }
  }

  // --- statistics and the tokenizer.json ----------------------------------------------------
  BpeTrainResult r;
  r.vocab_size = static_cast<int>(token.size());
  r.merges = static_cast<int>(merges.size());
  r.text_bytes = text_bytes;
  r.distinct_words = static_cast<long long>(words.size());
  for (std::size_t w = 0; w < words.size(); ++w)
    r.text_tokens += freq[w] * static_cast<long long>(words[w].size());

  const std::string byte_level = fmt::format(
      R"({{"type": "ByteLevel", "add_prefix_space": {}, "trim_offsets": true, "use_regex": true}})",
      opt.add_prefix_space ? "true" : "false");
  std::string& j = r.json;
  j.reserve(64 * token.size() + 32 * merges.size());
  j += "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  j += "  \"added_tokens\": [";
  for (int i = 0; i < n_special; ++i)
    j += fmt::format("{}\n    {{\"id\": {}, \"content\": {}, \"single_word\": false, \"lstrip\": "
                     "false, \"rstrip\": false, \"normalized\": false, \"special\": true}}",
                     i ? "," : "", i, json_string(token[i]));
  j += n_special ? "\n  ],\n" : "],\n";
  j += "  \"normalizer\": null,\n";
  j += "  \"pre_tokenizer\": " + byte_level + ",\n";
  j += "  \"post_processor\": " + byte_level + ",\n";
  j += "  \"decoder\": " + byte_level + ",\n";
  j += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
       "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
       "    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n"
       "    \"vocab\": {";
  for (std::size_t i = 0; i < token.size(); ++i)
    j += fmt::format("{}\n      {}: {}", i ? "," : "", json_string(token[i]), i);
  j += "\n    },\n    \"merges\": [";
  for (std::size_t i = 0; i < merges.size(); ++i)
    j += fmt::format("{}\n      [{}, {}]", i ? "," : "", json_string(token[merges[i].first]),
                     json_string(token[merges[i].second]));
  j += merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  return r;
}

}  // namespace text

std::string train_bpe_tokenizer_json(std::span<const std::string_view> texts,
                                     const BpeTrainOptions& options) {
  return text::train_bpe(texts, options).json;
}

}  // namespace normlab
