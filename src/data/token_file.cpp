// Token files: the format is described in include/normlab/data.h. Reading maps the file
// read-only (a corpus larger than RAM streams through the page cache); writing is atomic.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "data/token_store.h"
#include "normlab/data.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

constexpr char kMagic[8] = {'N', 'L', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 32;

template <typename T>
T load_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian host (static_assert in token_store.h)
  return v;
}

template <typename T>
void store_le(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw FormatError(fmt::format("[data] {}: {}", path, what));
}

// Printable rendering of the magic bytes found, for the error message.
std::string show_bytes(const unsigned char* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    s += (p[i] >= 0x20 && p[i] < 0x7F && p[i] != '\\' && p[i] != '"')
             ? std::string(1, static_cast<char>(p[i]))
             : fmt::format("\\x{:02x}", p[i]);
  return s;
}

// Index of the first token >= vocab, or -1. One sequential pass over the mapping.
template <typename T>
long first_out_of_vocab(const unsigned char* data, long count, std::uint32_t vocab) {
  for (long i = 0; i < count; ++i)
    if (load_le<T>(data + i * static_cast<long>(sizeof(T))) >= vocab) return i;
  return -1;
}

int width_for_vocab(int vocab) { return vocab <= (1 << 8) ? 1 : vocab <= (1 << 16) ? 2 : 4; }

// Writes all of buf, retrying short writes; false with errno set on failure.
bool write_all(int fd, const unsigned char* buf, std::size_t n) {
  while (n > 0) {
    const ssize_t put = ::write(fd, buf, n);
    if (put < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    buf += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

// Maps the whole of `path` read-only; fails (naming the file) unless it is a regular file of at
// least a header's size. Sets `file_bytes` to its size.
void* map_token_file(const std::string& path, std::uint64_t& file_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, fmt::format("cannot stat: {}", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (file_bytes < kHeaderBytes) {
    ::close(fd);
    fail(path, fmt::format("truncated: {} bytes, shorter than the {}-byte token file header",
                           file_bytes, kHeaderBytes));
  }
  void* addr = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (addr == MAP_FAILED) fail(path, fmt::format("cannot mmap: {}", std::strerror(map_err)));
  return addr;
}

// Checks the header `h` of a mapped file of `file_bytes` bytes and sets the store's data, width,
// count and vocab from it.
void read_header(const std::string& path, const unsigned char* h, std::uint64_t file_bytes,
                 detail::TokenStore& store) {
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0)
    fail(path, fmt::format("not a normlab token file: magic is \"{}\", expected \"NLTOKENS\"",
                           show_bytes(h, sizeof kMagic)));
  const auto version = load_le<std::uint32_t>(h + 8);
  const auto width = load_le<std::uint32_t>(h + 12);
  const auto count = load_le<std::uint64_t>(h + 16);
  const auto vocab = load_le<std::uint32_t>(h + 24);
  const auto reserved = load_le<std::uint32_t>(h + 28);
  if (version != kVersion)
    fail(path, fmt::format("unsupported token file version {} (this build reads version {})",
                           version, kVersion));
  if (width != 1 && width != 2 && width != 4)
    fail(path, fmt::format("bytes per token is {}; must be 1, 2 or 4", width));
  if (vocab == 0) fail(path, "vocab size is 0");
  if (vocab > static_cast<std::uint32_t>(std::numeric_limits<int>::max()))
    fail(path, fmt::format("vocab size {} exceeds the largest supported, {}", vocab,
                           std::numeric_limits<int>::max()));
  if (reserved != 0)
    fail(path, fmt::format("reserved header field is {}; must be 0 in version 1", reserved));
  if (count == 0) fail(path, "empty: the header declares 0 tokens");
  const std::uint64_t data_bytes = file_bytes - kHeaderBytes;
  if (count > data_bytes / width)
    fail(path, fmt::format("truncated: the header declares {} tokens of {} bytes but only {} bytes "
                           "follow the 32-byte header (token count does not match file size)",
                           count, width, data_bytes));
  if (count * width != data_bytes)
    fail(path, fmt::format("token count does not match file size: the header declares {} tokens "
                           "of {} bytes ({} bytes) but {} bytes follow the 32-byte header",
                           count, width, count * width, data_bytes));

  store.data = h + kHeaderBytes;
  store.width = static_cast<int>(width);
  store.count = static_cast<long>(count);  // <= file size, so it fits
  store.vocab = static_cast<int>(vocab);
}

// Validates every token of a mapped store once, so that a corrupt file fails at load time and
// copy() stays a plain load. Skipped when the width cannot hold a value >= vocab.
void check_tokens(const std::string& path, const detail::TokenStore& store) {
  const auto width = static_cast<std::uint32_t>(store.width);
  const auto vocab = static_cast<std::uint32_t>(store.vocab);
  if (width < 4 && vocab >= (std::uint64_t{1} << (8 * width))) return;
  ::madvise(store.map_addr, store.map_len, MADV_SEQUENTIAL);  // a hint: read ahead, drop behind
  const unsigned char* data = store.data;
  const long n = store.count;
  const long bad = width == 1   ? first_out_of_vocab<std::uint8_t>(data, n, vocab)
                   : width == 2 ? first_out_of_vocab<std::uint16_t>(data, n, vocab)
                                : first_out_of_vocab<std::uint32_t>(data, n, vocab);
  ::madvise(store.map_addr, store.map_len, MADV_NORMAL);
  if (bad >= 0) {
    const std::uint32_t value = width == 1   ? store.data[bad]
                                : width == 2 ? load_le<std::uint16_t>(store.data + 2 * bad)
                                             : load_le<std::uint32_t>(store.data + 4 * bad);
    fail(path, fmt::format("token {} at index {} (byte offset {}) is >= the vocab size {}", value,
                           bad, kHeaderBytes + static_cast<std::uint64_t>(bad) * width, vocab));
  }
}

}  // namespace

TokenCorpus TokenCorpus::from_token_file(const std::string& path) {
  std::uint64_t file_bytes = 0;
  void* addr = map_token_file(path, file_bytes);
  // From here the store owns the mapping and unmaps it if a check throws.
  auto store = std::make_shared<detail::TokenStore>();
  store->name = path;
  store->map_addr = addr;
  store->map_len = file_bytes;
  read_header(path, static_cast<const unsigned char*>(addr), file_bytes, *store);
  check_tokens(path, *store);
  return TokenCorpus(std::move(store));
}

void write_token_file(const std::string& path, std::span<const int> tokens, int vocab) {
  if (vocab < 1)
    throw InputError(fmt::format("[data] {}: vocab size {} must be >= 1", path, vocab));
  if (tokens.empty()) throw InputError(fmt::format("[data] {}: no tokens to write", path));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw InputError(fmt::format("[data] {}: token {} at index {} is outside [0, {})", path,
                                   tokens[i], i, vocab));
  const int width = width_for_vocab(vocab);

  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  store_le<std::uint32_t>(header + 8, kVersion);
  store_le<std::uint32_t>(header + 12, static_cast<std::uint32_t>(width));
  store_le<std::uint64_t>(header + 16, tokens.size());
  store_le<std::uint32_t>(header + 24, static_cast<std::uint32_t>(vocab));
  store_le<std::uint32_t>(header + 28, 0);

  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, fmt::format("cannot create {}: {}", tmp, std::strerror(errno)));
  auto give_up = [&](const char* what) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, fmt::format("cannot {} {}: {}", what, tmp, std::strerror(err)));
  };
  if (!write_all(fd, header, sizeof header)) give_up("write");
  constexpr std::size_t kChunk = 1 << 16;  // tokens per write
  std::vector<unsigned char> buf(kChunk * static_cast<std::size_t>(width));
  for (std::size_t begin = 0; begin < tokens.size(); begin += kChunk) {
    const std::size_t n = std::min(kChunk, tokens.size() - begin);
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::uint32_t>(tokens[begin + i]);
      if (width == 1) buf[i] = static_cast<unsigned char>(v);
      else if (width == 2) store_le<std::uint16_t>(&buf[2 * i], static_cast<std::uint16_t>(v));
      else store_le<std::uint32_t>(&buf[4 * i], v);
    }
    if (!write_all(fd, buf.data(), n * static_cast<std::size_t>(width))) give_up("write");
  }
  if (::fsync(fd) != 0) give_up("fsync");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, fmt::format("cannot close {}: {}", tmp, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(path, fmt::format("cannot rename {} into place: {}", tmp, std::strerror(err)));
  }
  // Make the rename itself durable.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace normlab
