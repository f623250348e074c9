// The data layer: turns text or pre-tokenized files into the (B, T) token windows the trainer
// consumes. A byte-level tokenizer (vocab 256); TokenCorpus, a token sequence that is either owned
// (from text), borrowed (the corpus compiled into the library) or memory-mapped (a token file,
// so a corpus larger than RAM works; it records the tokenizer that made it); CorpusView, a cheap contiguous slice that keeps its corpus
// alive; a deterministic train/validation split; BatchSampler, which draws windows at uniformly
// random offsets from a portable RNG, saves and restores its state exactly, and shards every
// global batch across data-parallel ranks; EvalBatches, fixed evenly spaced windows for sampled
// evaluation (training's validation); and ExactEvalBatches, non-overlapping windows that score
// every token once (`normlab eval`'s exact mode). Bad input throws FormatError (a file that is
// unreadable, malformed, not text) or InputError (arguments out of range, a corpus too small for
// the request), naming the file.
//
// Token file format (".tok", written by write_token_file, read with mmap by from_token_file):
//   offset  0: 8 bytes  magic "NLTOKENS"
//   offset  8: u32      version: 2 (with the tokenizer record), or 1 (without)
//   offset 12: u32      bytes per token: 1, 2 or 4
//   offset 16: u64      token count N (> 0)
//   offset 24: u32      vocab size V (1 <= V <= INT32_MAX)
//   offset 28: u32      R, the tokenizer record's size in bytes: a multiple of 8, 8 <= R <= 64 KiB
//                       (version 2); reserved, 0 (version 1)
//   offset 32: R bytes  the tokenizer record (version 2): a UTF-8 JSON object, padded with spaces,
//                       {"vocab_size": V, "hash": "fnv1a64:<16 hex digits>", "path": "...",
//                        "describe": "..."} (TokenizerRecord below)
//   offset 32 + R: N tokens, each an unsigned little-endian integer of that width, each < V.
// All header integers are little-endian; the file size must be exactly 32 + R + N * width.
// Version 1 files (written before the record existed) still load, as a token file of unknown
// tokenizer; training refuses to guess theirs (train/run_tokenizer.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
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
  // document (file) encoded on its own, in parallel, and the documents joined by
  // document_separator(tok) (for the byte tokenizer "\n": exactly from_path(path)). A token
  // file is memory-mapped as it is. The corpus's vocab_size() is tok.vocab_size().
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

// Which tokenizer made a token file (version 2). `hash` identifies the tokenizer's content: the
// 64-bit FNV-1a of the tokenizer file's bytes, or of a fixed description for the byte tokenizer
// (tokenizer_hash). FNV-1a is no cryptographic hash: it tells tokenizers apart, it does not
// defend against a file made to collide.
struct TokenizerRecord {
  int vocab_size = 0;
  std::string hash;      // "fnv1a64:" and 16 lowercase hex digits
  std::string path;      // the tokenizer file, absolute; "bytes" for the byte tokenizer
  std::string describe;  // Tokenizer::describe(), for messages
  bool is_bytes() const { return path == "bytes"; }
  bool operator==(const TokenizerRecord&) const = default;
};

// The hash of the tokenizer in `file` ("fnv1a64:..." of its bytes); of the byte tokenizer when
// `file` is empty or "bytes". Throws FormatError naming the file when it cannot be read.
std::string tokenizer_hash(const std::string& file);
// The record of tokenizer `tok`, loaded from `file` (empty or "bytes": the byte tokenizer).
TokenizerRecord tokenizer_record(const Tokenizer& tok, const std::string& file);

// A token file's header and record, read without mapping or checking its tokens.
struct TokenFileInfo {
  int version = 0;  // 1 or 2
  long count = 0;
  int vocab_size = 0;
  std::optional<TokenizerRecord> tokenizer;  // version 2
};
// std::nullopt when `path` is not a regular file starting with the magic "NLTOKENS"; otherwise
// the header, checked as from_token_file does (FormatError naming the file and the problem).
std::optional<TokenFileInfo> token_file_info(const std::string& path);

// The ids that join two documents of a corpus: the tokenizer's end-of-text token where it has
// one, else the ids of "\n" (the byte tokenizer: the byte 10). The end-of-text token is, first,
// the EOS of the tokenizer itself (a tokenizer.json post-processor template's token after the
// sequence, a SentencePiece model's eos_id); else a token flagged special named "<|endoftext|>"
// (GPT-2, Qwen 2, OLMo 2, `normlab tokenizer train --special-tokens "<|endoftext|>"`),
// "<|end_of_text|>" (Llama 3), "</s>" or "<eos>". It is decided from the tokenizer file alone,
// so a token file, training and evaluation of a text corpus agree.
std::vector<int> document_separator(const Tokenizer& tok);

// Writes a token file (format above) atomically: "<path>.tmp.<pid>", fsync, rename over `path`.
// The width is the smallest of 1, 2, 4 bytes that holds vocab - 1. With a tokenizer record the
// file is version 2, without one version 1. Throws InputError if tokens is empty, vocab < 1, a
// token is outside [0, vocab), or the record's vocab_size is not vocab; FormatError if the file
// cannot be written.
void write_token_file(const std::string& path, std::span<const int> tokens, int vocab,
                      const std::optional<TokenizerRecord>& tokenizer = std::nullopt);

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

// Start of evenly spaced evaluation window j (0 <= j < windows) in a view of `size` tokens, as
// EvalBatches places them: floor(j * (size - T - 1) / (windows - 1)), 0 for a single window.
long eval_window_offset(long size, int T, long windows, long j);

// What n batches of B evenly spaced windows of T (EvalBatches) score in a view of `size` tokens.
struct EvalCoverage {
  long windows = 0;   // n * B
  long targets = 0;   // n * B * T target positions, a token counted once per window holding it
  long distinct = 0;  // distinct tokens among them (< targets when windows overlap)
};
// Throws InputError when size < T + 1, or B, T or n < 1.
EvalCoverage eval_coverage(long size, int B, int T, int n);

// One rectangle of an exact evaluation: `rows` windows of `len` tokens each, the first of them
// window `first_window`, run by the model as one (rows, len) forward pass.
struct EvalBlock {
  int rows = 0;
  int len = 0;
  long first_window = 0;
};

// Exact evaluation: every token of the view but the first is a target exactly once
// (num_targets() = size - 1; the first token has nothing before it to be predicted from).
// The view is cut into non-overlapping windows of T: window j has the inputs [jT, jT + L_j) and
// the targets [jT + 1, jT + L_j + 1), L_j = min(T, size - 1 - jT), so there are
// ceil((size - 1) / T) windows, all of length T but perhaps the last (scored too, shorter).
// Context rule: the target at position t of a window (token jT + t + 1, 0 <= t < L_j) is
// predicted from the t + 1 tokens jT .. jT + t of its own window only, nothing from the window
// before: the first targets of each window have little context (the mean over t of t + 1 is
// about T / 2 tokens of context), which makes the loss slightly higher than a sliding window's.
// The windows are grouped into blocks: full blocks of B windows of T, then the remaining full
// windows (fewer than B rows), then the short last window on its own (one row of L < T), so the
// model never sees padding and a caller weights block k's mean by rows * len.
class ExactEvalBatches {
 public:
  // Throws InputError unless B, T >= 1 and the view holds at least 2 tokens (one target).
  ExactEvalBatches(CorpusView view, int B, int T);

  long num_targets() const { return view_.size() - 1; }
  long num_windows() const { return (num_targets() + T_ - 1) / T_; }
  long num_blocks() const;
  int max_rows() const { return B_; }  // B: the most rows of a block
  int seq_len() const { return T_; }   // T: the longest window
  const CorpusView& view() const { return view_; }

  EvalBlock block(long k) const;  // 0 <= k < num_blocks()
  // Block k's windows into idx and targets, each (rows, len) row-major (at most B * T ints).
  EvalBlock fill(long k, int* idx, int* targets) const;
  // Iterator form: fills the next block into b, idx, targets and returns true, or returns false
  // after the last one.
  bool next(EvalBlock& b, int* idx, int* targets);
  void reset() { cursor_ = 0; }

 private:
  CorpusView view_;
  int B_, T_;
  long cursor_ = 0;
};

}  // namespace normlab
