// The data layer: turns text or pre-tokenized files into the (B, T) token windows the trainer
// consumes. A byte-level tokenizer (vocab 256); TokenCorpus, a token sequence that is either owned
// (from text), borrowed (the corpus compiled into the library) or memory-mapped (a token file,
// so a corpus larger than RAM works); CorpusView, a cheap contiguous slice that keeps its corpus
// alive; a deterministic train/validation split; BatchSampler, which draws windows at uniformly
// random offsets from a portable RNG, saves and restores its state exactly, and shards every
// global batch across data-parallel ranks; and EvalBatches, fixed evenly spaced windows for
// evaluation. Bad input throws FormatError (a file that is unreadable, malformed, not text) or
// InputError (arguments out of range, a corpus too small for the request), naming the file.
//
// Token file format (".tok", written by write_token_file, read with mmap by from_token_file):
//   offset  0: 8 bytes  magic "NLTOKENS"
//   offset  8: u32      version, 1
//   offset 12: u32      bytes per token: 1, 2 or 4
//   offset 16: u64      token count N (> 0)
//   offset 24: u32      vocab size V (1 <= V <= INT32_MAX)
//   offset 28: u32      reserved, 0
//   offset 32: N tokens, each an unsigned little-endian integer of that width, each < V.
// All header integers are little-endian; the file size must be exactly 32 + N * width.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/tokenizer.h"

namespace normlab {

// ---------------------------------------------------------------------------------------------
// Embedded corpus

// The default corpus compiled into the library: data/wordnet_glosses.txt (WordNet 3.0 glosses,
// about 4 MB of ASCII, one gloss per line; see data/README.md). Static storage, never freed.
std::string_view embedded_corpus();

// ---------------------------------------------------------------------------------------------
// Corpora

// One text file's content (checked: UTF-8, no NUL, few control bytes) and its path.
struct TextDocument {
  std::string path;
  std::string text;
};
// A text file (one document) or a folder: its regular files below it, recursively, skipping hidden
// files and folders, sorted by path, empty files dropped. Throws FormatError naming the file (and
// the byte offset of the first bad sequence) for a file that is not text, or when nothing is left.
std::vector<TextDocument> read_text_documents(const std::string& path);

namespace detail {
struct TokenStore;  // the tokens and whatever owns them (a string, a mapping, nothing)
}

// A contiguous slice [begin, begin + size) of a corpus. Copies are cheap and share the storage,
// which stays alive as long as any view does.
class CorpusView {
 public:
  CorpusView() = default;  // empty, belongs to no corpus
  long size() const { return size_; }
  int vocab_size() const;
  const std::string& name() const;  // for messages: the file, or the name given to from_text
  long begin() const { return begin_; }  // offset of this view within its corpus
  int token(long i) const;               // 0 <= i < size()
  // Writes tokens [begin, begin + n) of this view to dst (n ints); the range must lie inside.
  void copy(long begin, long n, int* dst) const;
  CorpusView slice(long begin, long n) const;

 private:
  friend class TokenCorpus;
  CorpusView(std::shared_ptr<const detail::TokenStore> store, long begin, long size)
      : store_(std::move(store)), begin_(begin), size_(size) {}
  std::shared_ptr<const detail::TokenStore> store_;
  long begin_ = 0;
  long size_ = 0;
};

struct CorpusSplit {
  CorpusView train;       // the first (1 - val_fraction) of the corpus
  CorpusView validation;  // the last val_fraction
};

class TokenCorpus {
 public:
  // Byte tokens of `text` (copied). The text must be non-empty UTF-8 with no NUL bytes and at
  // most 1% control bytes (other than \t \n \v \f \r); `name` is used
  // in messages.
  static TokenCorpus from_text(std::string_view text, std::string name);
  // A UTF-8 text file, or a folder: all regular files below it, recursively, skipping hidden
  // files and folders (name starting with '.'), sorted by path, concatenated with one '\n'
  // between files. Each file is checked as in from_text; errors name the file and the byte
  // offset of the first bad sequence.
  static TokenCorpus from_text_path(const std::string& path);
  // A token file (format above), memory-mapped read-only. The header is validated on open, and
  // so is every token (< vocab): one sequential pass over the mapping, streaming through the
  // page cache, so corrupt data is reported at load time with its index rather than mid-run.
  static TokenCorpus from_token_file(const std::string& path);
  // Text (a file, a folder or, for an empty path, the embedded corpus) encoded with `tok`: each
  // document (file) encoded on its own, in parallel, and the documents joined by the ids of
  // tok.encode("\n") (for the byte tokenizer this is exactly from_path(path)). A token file is
  // memory-mapped as it is. The corpus's vocab_size() is tok.vocab_size().
  static TokenCorpus from_path(const std::string& path, const Tokenizer& tok);
  static TokenCorpus from_documents(const std::vector<TextDocument>& docs, std::string name,
                                    const Tokenizer& tok);
  // embedded_corpus() without copying; name "embedded:wordnet_glosses".
  static TokenCorpus embedded();
  // What data.path names: empty, the embedded corpus; a token file (recognised by its magic),
  // memory-mapped; otherwise a text file or folder (from_text_path).
  static TokenCorpus from_path(const std::string& path);

  long size() const { return view_.size(); }
  int vocab_size() const { return view_.vocab_size(); }
  const std::string& name() const { return view_.name(); }
  int token(long i) const { return view_.token(i); }
  void copy(long begin, long n, int* dst) const { view_.copy(begin, n, dst); }
  const CorpusView& view() const { return view_; }
  operator const CorpusView&() const { return view_; }  // NOLINT: a corpus is its full view

  // Deterministic contiguous split: validation is the last round(size * val_fraction) tokens,
  // train everything before. Contiguous rather than interleaved chunks so that no training
  // window overlaps a validation window, and the split does not depend on T. (The embedded
  // corpus interleaves parts of speech line by line, so both sides have the same mix.)
  // Throws InputError unless 0 < val_fraction < 1 and both parts hold at least seq_len + 1
  // tokens (one window of T inputs plus the shifted target).
  CorpusSplit split(double val_fraction, int seq_len) const;

 private:
  explicit TokenCorpus(std::shared_ptr<const detail::TokenStore> store);
  CorpusView view_;
};

// Writes a token file (format above) atomically: "<path>.tmp.<pid>", fsync, rename over `path`.
// The width is the smallest of 1, 2, 4 bytes that holds vocab - 1. Throws InputError if tokens is
// empty, vocab < 1, or a token is outside [0, vocab); FormatError if the file cannot be written.
void write_token_file(const std::string& path, std::span<const int> tokens, int vocab);

// ---------------------------------------------------------------------------------------------
// Batches

// Everything needed to continue a BatchSampler's stream exactly (saved in checkpoints).
struct SamplerState {
  std::uint64_t rng_state = 0;
  std::uint64_t batches_drawn = 0;
  bool operator==(const SamplerState&) const = default;
};

// Random training windows. Each call to next() makes one global draw of B window offsets,
// uniform in [0, size - T - 1], from normlab::Rng(seed) (splitmix64, identical on every
// platform); row g is tokens [o_g, o_g + T) and its targets [o_g + 1, o_g + T + 1).
// With `world` data-parallel ranks, B is the global batch: every rank makes the same draw (all
// ranks share the RNG stream) and keeps rows [rank * B / world, (rank + 1) * B / world), so
// concatenating the ranks' rows gives the world == 1 batch for the same seed, whatever world
// divides B. No allocation in next().
class BatchSampler {
 public:
  // Throws InputError unless B, T >= 1, world >= 1, 0 <= rank < world, world divides B, and the
  // view holds at least T + 1 tokens.
  BatchSampler(CorpusView view, int B, int T, std::uint64_t seed, int rank = 0, int world = 1);

  int local_batch() const { return B_ / world_; }  // rows per next() on this rank
  int global_batch() const { return B_; }
  int seq_len() const { return T_; }

  // idx, targets: (local_batch(), T), row-major; targets[r][t] = idx[r][t + 1] for t < T - 1.
  void next(int* idx, int* targets);

  SamplerState state() const { return {rng_state_, batches_drawn_}; }
  void restore(const SamplerState& s) {
    rng_state_ = s.rng_state;
    batches_drawn_ = s.batches_drawn;
  }

 private:
  CorpusView view_;
  int B_, T_, rank_, world_;
  std::uint64_t rng_state_;  // normlab::Rng state (src/tensor/rng.h), kept raw to stay header-light
  std::uint64_t batches_drawn_ = 0;
};

// Deterministic evaluation windows: n batches of B rows, n * B windows in all, whose offsets are
// evenly spaced from the start of the view to its end (the first window starts at token 0, the
// last ends at the last token: o_j = floor(j * (size - T - 1) / (n * B - 1))). Windows overlap
// when the view is short. Batch k holds windows k * B ... k * B + B - 1; rank/world shard each
// batch as BatchSampler does. The same arguments give the same windows on every call.
class EvalBatches {
 public:
  // Throws InputError under the same conditions as BatchSampler, or if n < 1.
  EvalBatches(CorpusView view, int B, int T, int n, int rank = 0, int world = 1);

  int num_batches() const { return n_; }
  int local_batch() const { return B_ / world_; }
  int seq_len() const { return T_; }

  // Batch k (0 <= k < num_batches()): idx, targets are (local_batch(), T).
  void fill(int k, int* idx, int* targets) const;
  // Iterator form: fills the next batch and returns true, or returns false after the last one.
  bool next(int* idx, int* targets);
  void reset() { cursor_ = 0; }

 private:
  long offset(long j) const;  // start of global window j
  CorpusView view_;
  int B_, T_, n_, rank_, world_;
  int cursor_ = 0;
};

inline EvalBatches eval_batches(CorpusView view, int B, int T, int n, int rank = 0, int world = 1) {
  return EvalBatches(std::move(view), B, T, n, rank, world);
}

}  // namespace normlab
