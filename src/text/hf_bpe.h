// Internal (tokenizer.json): the BPE model: vocabulary, merges by rank, unk, byte fallback and
// ignore_merges, behind a per-word cache shared by all threads. A word's characters, or for a
// byte-level pre-tokenizer its raw bytes already mapped to their symbols, are merged lowest rank
// first, ties leftmost, as the reference's Word::merge_all.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace normlab::text::hf {

constexpr std::size_t kMaxVocab = std::size_t{1} << 24;
constexpr std::size_t kCacheWordMax = 256;  // longer words are not cached (the reference's rule)
constexpr std::size_t kCacheShards = 32;
constexpr std::size_t kCacheShardCapacity = 8192;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int, StringHash, std::equal_to<>>;

struct PairHash {
  std::size_t operator()(std::uint64_t x) const {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return static_cast<std::size_t>(x);
  }
};
struct MergeInfo {
  int rank, new_id;
};
using Merges = std::unordered_map<std::uint64_t, MergeInfo, PairHash>;

inline std::uint64_t pair_key(int a, int b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

// Per-word results, shared by all threads: sharded so that threads rarely wait on each other.
class WordCache {
 public:
  bool get(std::string_view w, std::size_t h, std::vector<int>& out) const {
    Shard& s = shards_[h % kCacheShards];
    std::lock_guard lock(s.m);
    const auto it = s.map.find(w);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(std::string_view w, std::size_t h, std::span<const int> ids) const {
    Shard& s = shards_[h % kCacheShards];
    std::lock_guard lock(s.m);
    if (s.map.size() >= kCacheShardCapacity) return;  // full: stop caching, as the reference
    s.map.emplace(std::string(w), std::vector<int>(ids.begin(), ids.end()));
  }

 private:
  struct Shard {
    std::mutex m;
    std::unordered_map<std::string, std::vector<int>, StringHash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kCacheShards> shards_;
};

struct Symbol {
  int id, prev, next, len;
};

class Bpe {
 public:
  Vocab vocab;
  Vocab raw_vocab;  // byte-level tokens by the bytes they stand for (ignore_merges on raw words)
  std::vector<std::string> id_to_token;
  Merges merges;
  std::optional<int> unk;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int, 256> byte_token{};  // id of "<0xNN>", or -1
  std::array<int, 256> byte_symbol{};  // id of the byte-level character for byte b, or -1
  bool raw_ready = false;             // every byte has a byte-level symbol

  // Fills byte_symbol (raw_ready when all 256 bytes have one) and raw_vocab: for a byte-level
  // pre-tokenizer.
  void prepare_byte_level();
  // Fills byte_token: for byte_fallback.
  void prepare_byte_fallback();

  // Appends the ids of one word. raw: the word is unmapped bytes of a byte-level pre-tokenizer.
  void tokenize(std::string_view word, bool raw, std::vector<int>& out) const;

 private:
  WordCache cache_;

  static void add_symbol(std::vector<Symbol>& syms, int id, int len);
  void merge_word(std::string_view w, std::vector<int>& out) const;
  void merge_all(std::vector<Symbol>& syms, std::vector<int>& out) const;
};

}  // namespace normlab::text::hf
