// Fuzz target: the token file reader (format in include/normlab/data.h) on arbitrary bytes.
//
// The input is written to a file (an in-memory one, memfd, reached through /proc/self/fd: a
// regular file that mmap accepts, without disk traffic per execution) and opened with
// TokenCorpus::from_token_file. Properties: it either throws normlab::Error or accepts a file whose
// size is exactly 32 + R + count * width with a width of 1, 2 or 4 (R = 0 in version 1, the
// tokenizer record's size in version 2, which token_file_info then reads as the same record);
// every token then reads back (by token() and by copy()) as the little-endian integer at its
// offset, below the vocab size.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "normlab/data.h"

using namespace normlab;

namespace {

// One file for the whole run, rewritten for every input.
int input_fd() {
  static const int fd = [] {
    const int f = ::memfd_create("normlab_fuzz_tokens", MFD_CLOEXEC);
    FUZZ_CHECK(f >= 0);
    return f;
  }();
  return fd;
}

std::uint32_t load_le(const std::uint8_t* p, int width) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, static_cast<std::size_t>(width));  // little-endian host
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = input_fd();
  FUZZ_CHECK(::ftruncate(fd, 0) == 0);
  FUZZ_CHECK(::pwrite(fd, data, size, 0) == static_cast<ssize_t>(size));
  const std::string path = "/proc/self/fd/" + std::to_string(fd);

  std::optional<TokenCorpus> corpus;
  if (!accepts([&] { corpus.emplace(TokenCorpus::from_token_file(path)); })) return 0;

  FUZZ_CHECK(size >= 32 && std::memcmp(data, "NLTOKENS", 8) == 0);
  std::uint32_t version, width, vocab, field28;
  std::memcpy(&version, data + 8, 4);
  std::memcpy(&width, data + 12, 4);
  std::memcpy(&vocab, data + 24, 4);
  std::memcpy(&field28, data + 28, 4);
  FUZZ_CHECK(version == 1 || version == 2);
  FUZZ_CHECK(width == 1 || width == 2 || width == 4);
  const std::size_t R = version == 2 ? field28 : 0;
  FUZZ_CHECK(version == 2 ? R >= 8 && R % 8 == 0 : field28 == 0);
  const long n = corpus->size();
  FUZZ_CHECK(n > 0 && static_cast<std::size_t>(n) * width + 32 + R == size);
  std::optional<TokenFileInfo> info;
  FUZZ_CHECK(accepts([&] { info = token_file_info(path); }));
  FUZZ_CHECK(info && info->version == static_cast<int>(version) && info->count == n);
  FUZZ_CHECK(info->tokenizer.has_value() == (version == 2));
  if (info->tokenizer) FUZZ_CHECK(info->tokenizer->vocab_size == static_cast<int>(vocab));
  FUZZ_CHECK(static_cast<std::uint32_t>(corpus->vocab_size()) == vocab);

  std::vector<int> tokens(static_cast<std::size_t>(n));
  corpus->copy(0, n, tokens.data());
  for (long i = 0; i < n; ++i) {
    const std::uint32_t expected = load_le(data + 32 + R + i * width, static_cast<int>(width));
    FUZZ_CHECK(expected < vocab);
    FUZZ_CHECK(tokens[static_cast<std::size_t>(i)] == static_cast<int>(expected));
    FUZZ_CHECK(corpus->token(i) == static_cast<int>(expected));
  }
  // A slice reads the same tokens.
  const CorpusView tail = corpus->view().slice(n / 2, n - n / 2);
  for (long i = 0; i < tail.size(); ++i) FUZZ_CHECK(tail.token(i) == tokens[n / 2 + i]);
  return 0;
}
