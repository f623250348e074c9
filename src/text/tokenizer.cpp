// The Tokenizer base (lossy UTF-8 text, byte lengths, batch encoding), the byte-level tokenizer,
// load_tokenizer()'s choice of loader, and DecodeStream.
#include "normlab/tokenizer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "text/utf8.h"

namespace normlab {

// --- Tokenizer ---------------------------------------------------------------------------------

std::vector<std::vector<int>> Tokenizer::encode_batch(std::span<const std::string_view> texts,
                                                      bool add_special) const {
  std::vector<std::vector<int>> out(texts.size());
  const long n = static_cast<long>(texts.size());
  // An exception must not leave the parallel region (that terminates the process): the first
  // text's (lowest index) is rethrown after it, as a serial loop would have thrown it.
  std::exception_ptr error;
  long error_at = n;
#pragma omp parallel for schedule(dynamic, 16)
  for (long i = 0; i < n; ++i) {
    try {
      out[i] = encode(texts[i], add_special);
    } catch (...) {
#pragma omp critical(normlab_encode_batch_error)
      if (i < error_at) error_at = i, error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  return out;
}

std::string Tokenizer::decode(std::span<const int> ids, bool skip_special) const {
  return text::utf8_lossy(decode_bytes(ids, skip_special));
}

std::vector<int> Tokenizer::token_byte_lengths() const {
  std::vector<int> len(vocab_size());
  for (int id = 0; id < vocab_size(); ++id)
    len[id] = is_special(id) ? 0 : static_cast<int>(decode_bytes(std::span<const int>(&id, 1)).size());
  return len;
}

// --- ByteTokenizer -----------------------------------------------------------------------------

std::vector<int> ByteTokenizer::encode(std::string_view text, bool) const {
  std::vector<int> tokens(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode_bytes(std::span<const int> tokens, bool) const {
  std::string text(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const int t = tokens[i];
    if (t < 0 || t >= kVocabSize)
      throw InputError(fmt::format(
          "[tokenizer] token {} at index {} is outside the byte vocabulary [0, {})", t, i,
          kVocabSize));
    text[i] = static_cast<char>(static_cast<unsigned char>(t));
  }
  return text;
}

std::optional<int> ByteTokenizer::token_to_id(std::string_view token) const {
  if (token.size() != 1) return std::nullopt;
  return static_cast<unsigned char>(token[0]);
}

std::string ByteTokenizer::id_to_token(int id) const {
  return decode_bytes(std::span<const int>(&id, 1));
}

std::vector<int> ByteTokenizer::token_byte_lengths() const {
  return std::vector<int>(kVocabSize, 1);
}

// --- load_tokenizer ----------------------------------------------------------------------------

namespace {

std::string read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw FormatError(fmt::format("[tokenizer] {}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw FormatError(fmt::format("[tokenizer] {}: not a regular file", path));
  }
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  while (got < data.size()) {
    const ssize_t r = ::read(fd, data.data() + got, data.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      throw FormatError(fmt::format("[tokenizer] {}: read failed after {} of {} bytes{}", path,
                                    got, data.size(), r < 0 ? ": " + std::string(std::strerror(e)) : ""));
    }
    got += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return data;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec.empty() || spec == "bytes") return std::make_unique<ByteTokenizer>();
  const std::string data = read_whole_file(spec);
  std::size_t i = 0;
  while (i < data.size() && (data[i] == ' ' || data[i] == '\n' || data[i] == '\r' || data[i] == '\t'))
    ++i;
  if (i < data.size() && data[i] == '{') return load_hf_tokenizer_json(data, spec);
  return load_sentencepiece(data, spec);
}

// --- DecodeStream ------------------------------------------------------------------------------

DecodeStream::DecodeStream(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

// The text of ids_[prefix_, read_) is what was emitted last; decoding ids_[prefix_, end) with that
// context gives the new text as its suffix (a SentencePiece decoder strips the leading space of
// the first id only, which is inside the context). Emit when the new text is final: its bytes end
// in whole UTF-8 characters, and the last id is no byte-fallback token (a run of <0xNN> tokens
// decodes as a whole: one ill-formed byte later turns every byte of the run into U+FFFD, so the
// run is held until a token of another kind ends it). Then move the context forward.
std::string DecodeStream::push(int id) {
  ids_.push_back(id);
  if (tok_.is_byte_fallback(id)) return {};
  const std::span<const int> all(ids_);
  if (text::ends_in_incomplete_utf8(tok_.decode_bytes(all.subspan(prefix_), skip_special_)))
    return {};
  const std::string before = tok_.decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  const std::string now = tok_.decode(all.subspan(prefix_), skip_special_);
  if (now.size() <= before.size() || now.compare(0, before.size(), before) != 0) return {};
  prefix_ = read_;
  read_ = ids_.size();
  return now.substr(before.size());
}

std::string DecodeStream::finish() {
  const std::span<const int> all(ids_);
  const std::string before = tok_.decode(all.subspan(prefix_, read_ - prefix_), skip_special_);
  const std::string now = tok_.decode(all.subspan(prefix_), skip_special_);
  prefix_ = read_ = ids_.size();
  if (now.size() <= before.size() || now.compare(0, before.size(), before) != 0) return {};
  return now.substr(before.size());
}

bool Tokenizer::is_byte_fallback(int id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const std::string t = id_to_token(id);
  const auto hex = [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f');
  };
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

}  // namespace normlab
