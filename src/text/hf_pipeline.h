// Internal (tokenizer.json): the pipeline stages around the BPE model, as data read from their
// JSON components: normalizers, pre-tokenizers, decoders (each a flat list, Sequences expanded)
// and the post-processor's template. They run in hf_normalizer.cpp, hf_pre_tokenizer.cpp,
// hf_decoder.cpp and HfTokenizer::encode (hf_tokenizer.cpp).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "text/hf_json.h"

namespace normlab::text::hf {

// --- Normalizers -------------------------------------------------------------------------------

struct NormStep {
  enum Kind { kNfc, kNfd, kNfkc, kNfkd, kPrepend, kReplace } kind;
  std::string text;  // Prepend's string, Replace's content
  Pattern pattern;   // Replace
};

void read_normalizer(const Reader& r, const json& v, const std::string& path,
                     std::vector<NormStep>& out);

std::string normalize(const std::vector<NormStep>& steps, std::string_view in);

// --- Pre-tokenizers ----------------------------------------------------------------------------

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class Prepend { kAlways, kFirst, kNever };

struct PreStep {
  enum Kind { kByteLevel, kSplit, kMetaspace, kDigits } kind;
  bool add_prefix_space = false, use_regex = false;  // ByteLevel
  Pattern pattern;                                   // Split
  Behavior behavior = Behavior::kIsolated;           // Split
  bool invert = false;                               // Split
  std::string replacement;                           // Metaspace
  Prepend prepend = Prepend::kAlways;                // Metaspace
  bool split = true;                                 // Metaspace
  bool individual_digits = false;                    // Digits
};

// Metaspace's prepend_scheme (or, in older files, add_prefix_space), for pre-tokenizer and
// decoder alike.
Prepend read_prepend_scheme(const Reader& r, const json& v, const std::string& path);

void read_pre_tokenizer(const Reader& r, const json& v, const std::string& path,
                        std::vector<PreStep>& out);

// A piece of a string being split: [b, e), and whether it is a match.
struct Span {
  std::size_t b, e;
  bool match;
};

// --- Decoders ----------------------------------------------------------------------------------

struct DecStep {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  Pattern pattern;       // Replace
  std::string content;   // Replace's content, Strip's character, Metaspace's replacement
  std::size_t start = 0, stop = 0;  // Strip
  bool drop_first = true;           // Metaspace: prepend_scheme != never
};

void read_decoder(const Reader& r, const json& v, const std::string& path,
                  std::vector<DecStep>& out);

// --- Post-processor ----------------------------------------------------------------------------

struct Template {
  struct Item {
    bool is_sequence = false;
    std::vector<int> ids;  // a special token's ids
  };
  std::vector<Item> single;
};

}  // namespace normlab::text::hf
