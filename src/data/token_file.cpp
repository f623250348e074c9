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
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "data/token_store.h"
#include "normlab/data.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

constexpr char kMagic[8] = {'N', 'L', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr std::uint32_t kVersionPlain = 1;   // no tokenizer record
constexpr std::uint32_t kVersionRecord = 2;  // the tokenizer record after the header
constexpr std::size_t kHeaderBytes = 32;
constexpr std::uint32_t kMaxRecordBytes = 64 * 1024;
// What the byte tokenizer's hash is taken of: it has no file.
constexpr std::string_view kByteTokenizerIdentity = "normlab byte tokenizer: token i is byte i, 256 tokens";

// 64-bit FNV-1a (Fowler, Noll, Vo): h = (h ^ byte) * 0x100000001b3 from 0xcbf29ce484222325.
struct Fnv1a64 {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(const char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(p[i]);
      h *= 0x100000001b3ull;
    }
  }
  std::string text() const { return fmt::format("fnv1a64:{:016x}", h); }
};

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

struct Header {
  std::uint32_t version = 0, width = 0, vocab = 0;
  std::uint64_t count = 0;
  std::uint32_t record_bytes = 0;  // R: 0 in version 1
};

// Checks the 32-byte header `h` of a file of `file_bytes` bytes (its magic already matched).
Header check_header(const std::string& path, const unsigned char* h, std::uint64_t file_bytes) {
  Header r;
  r.version = load_le<std::uint32_t>(h + 8);
  r.width = load_le<std::uint32_t>(h + 12);
  r.count = load_le<std::uint64_t>(h + 16);
  r.vocab = load_le<std::uint32_t>(h + 24);
  const auto field28 = load_le<std::uint32_t>(h + 28);
  const std::uint32_t version = r.version, width = r.width, vocab = r.vocab;
  const std::uint64_t count = r.count;
  if (version != kVersionPlain && version != kVersionRecord)
    fail(path, fmt::format("unsupported token file version {} (this build reads versions 1 and 2)",
                           version));
  if (width != 1 && width != 2 && width != 4)
    fail(path, fmt::format("bytes per token is {}; must be 1, 2 or 4", width));
  if (vocab == 0) fail(path, "vocab size is 0");
  if (vocab > static_cast<std::uint32_t>(std::numeric_limits<int>::max()))
    fail(path, fmt::format("vocab size {} exceeds the largest supported, {}", vocab,
                           std::numeric_limits<int>::max()));
  if (version == kVersionPlain && field28 != 0)
    fail(path, fmt::format("reserved header field is {}; must be 0 in version 1", field28));
  if (version == kVersionRecord) {
    if (field28 < 8 || field28 > kMaxRecordBytes || field28 % 8 != 0)
      fail(path, fmt::format("tokenizer record size is {} bytes; must be a multiple of 8 from 8 "
                             "to {}", field28, kMaxRecordBytes));
    r.record_bytes = field28;
  }
  if (count == 0) fail(path, "empty: the header declares 0 tokens");
  const std::uint64_t before = kHeaderBytes + r.record_bytes;
  if (file_bytes < before)
    fail(path, fmt::format("truncated: {} bytes, shorter than the 32-byte header and the {}-byte "
                           "tokenizer record", file_bytes, r.record_bytes));
  const std::uint64_t data_bytes = file_bytes - before;
  const std::string after = r.record_bytes ? "the header and the tokenizer record"
                                           : "the 32-byte header";
  if (count > data_bytes / width)
    fail(path, fmt::format("truncated: the header declares {} tokens of {} bytes but only {} bytes "
                           "follow {} (token count does not match file size)",
                           count, width, data_bytes, after));
  if (count * width != data_bytes)
    fail(path, fmt::format("token count does not match file size: the header declares {} tokens "
                           "of {} bytes ({} bytes) but {} bytes follow {}",
                           count, width, count * width, data_bytes, after));
  return r;
}

// The tokenizer record of a version 2 file: a JSON object whose vocab_size is the header's.
TokenizerRecord parse_record(const std::string& path, std::string_view text, std::uint32_t vocab) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, fmt::format("tokenizer record is not valid JSON: {}", e.what()));
  }
  if (!j.is_object()) fail(path, "tokenizer record is not a JSON object");
  const auto field = [&](const char* key, bool (nlohmann::json::*is)() const noexcept,
                         const char* what) -> const nlohmann::json& {
    const auto it = j.find(key);
    if (it == j.end() || !((*it).*is)())
      fail(path, fmt::format("tokenizer record: \"{}\" must be {}", key, what));
    return *it;
  };
  TokenizerRecord r;
  const nlohmann::json& v = field("vocab_size", &nlohmann::json::is_number_integer, "an integer");
  if (v.get<std::int64_t>() != static_cast<std::int64_t>(vocab))
    fail(path, fmt::format("tokenizer record: vocab_size {} is not the header's vocab size {}",
                           v.dump(), vocab));
  r.vocab_size = static_cast<int>(vocab);
  r.hash = field("hash", &nlohmann::json::is_string, "a string").get<std::string>();
  const bool hex = r.hash.size() == 24 && r.hash.starts_with("fnv1a64:") &&
                   r.hash.find_first_not_of("0123456789abcdef", 8) == std::string::npos;
  if (!hex)
    fail(path, fmt::format("tokenizer record: hash \"{}\" is not \"fnv1a64:\" and 16 hex digits",
                           r.hash));
  r.path = field("path", &nlohmann::json::is_string, "a string").get<std::string>();
  if (r.path.empty()) fail(path, "tokenizer record: \"path\" is empty");
  r.describe = field("describe", &nlohmann::json::is_string, "a string").get<std::string>();
  return r;
}

// Checks the header (and record) of a mapped file of `file_bytes` bytes and sets the store's
// data, width, count and vocab from it.
void read_header(const std::string& path, const unsigned char* h, std::uint64_t file_bytes,
                 detail::TokenStore& store) {
  if (std::memcmp(h, kMagic, sizeof kMagic) != 0)
    fail(path, fmt::format("not a normlab token file: magic is \"{}\", expected \"NLTOKENS\"",
                           show_bytes(h, sizeof kMagic)));
  const Header hd = check_header(path, h, file_bytes);
  if (hd.record_bytes)
    parse_record(path,
                 std::string_view(reinterpret_cast<const char*>(h + kHeaderBytes), hd.record_bytes),
                 hd.vocab);
  store.data = h + kHeaderBytes + hd.record_bytes;
  store.width = static_cast<int>(hd.width);
  store.count = static_cast<long>(hd.count);  // <= file size, so it fits
  store.vocab = static_cast<int>(hd.vocab);
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
                           bad, static_cast<std::uint64_t>(store.data - static_cast<const unsigned char*>(store.map_addr)) +
                                     static_cast<std::uint64_t>(bad) * width,
                           vocab));
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

std::string tokenizer_hash(const std::string& file) {
  Fnv1a64 h;
  if (file.empty() || file == "bytes") {
    h.add(kByteTokenizerIdentity.data(), kByteTokenizerIdentity.size());
    return h.text();
  }
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw FormatError(fmt::format("[data] {}: cannot open the tokenizer to hash it: {}", file,
                                  std::strerror(errno)));
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    h.add(buf, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw FormatError(fmt::format("[data] {}: cannot read the tokenizer to hash it", file));
  return h.text();
}

TokenizerRecord tokenizer_record(const Tokenizer& tok, const std::string& file) {
  const bool bytes = file.empty() || file == "bytes";
  TokenizerRecord r;
  r.vocab_size = tok.vocab_size();
  r.hash = tokenizer_hash(file);
  r.path = bytes ? std::string("bytes")
                 : std::filesystem::absolute(file).lexically_normal().string();
  r.describe = tok.describe();
  return r;
}

std::optional<TokenFileInfo> token_file_info(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream f(path, std::ios::binary);
  unsigned char h[kHeaderBytes] = {};
  f.read(reinterpret_cast<char*>(h), sizeof h);
  const auto got = static_cast<std::size_t>(f.gcount());
  if (got < sizeof kMagic || std::memcmp(h, kMagic, sizeof kMagic) != 0) return std::nullopt;
  const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) fail(path, fmt::format("cannot stat: {}", ec.message()));
  if (got < kHeaderBytes)
    fail(path, fmt::format("truncated: {} bytes, shorter than the {}-byte token file header",
                           file_bytes, kHeaderBytes));
  const Header hd = check_header(path, h, file_bytes);
  TokenFileInfo info;
  info.version = static_cast<int>(hd.version);
  info.count = static_cast<long>(hd.count);
  info.vocab_size = static_cast<int>(hd.vocab);
  if (hd.record_bytes) {
    std::string record(hd.record_bytes, '\0');
    f.read(record.data(), hd.record_bytes);
    if (static_cast<std::size_t>(f.gcount()) != hd.record_bytes)
      fail(path, "cannot read the tokenizer record");
    info.tokenizer = parse_record(path, record, hd.vocab);
  }
  return info;
}

void write_token_file(const std::string& path, std::span<const int> tokens, int vocab,
                      const std::optional<TokenizerRecord>& tokenizer) {
  if (vocab < 1)
    throw InputError(fmt::format("[data] {}: vocab size {} must be >= 1", path, vocab));
  if (tokens.empty()) throw InputError(fmt::format("[data] {}: no tokens to write", path));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw InputError(fmt::format("[data] {}: token {} at index {} is outside [0, {})", path,
                                   tokens[i], i, vocab));
  std::string record;  // the JSON object, padded with spaces to a multiple of 8 bytes
  if (tokenizer) {
    if (tokenizer->vocab_size != vocab)
      throw InputError(fmt::format("[data] {}: the tokenizer record's vocab_size {} is not the "
                                   "token file's vocab size {}", path, tokenizer->vocab_size,
                                   vocab));
    record = nlohmann::json{{"vocab_size", tokenizer->vocab_size},
                            {"hash", tokenizer->hash},
                            {"path", tokenizer->path},
                            {"describe", tokenizer->describe}}
                 .dump();
    record.resize((record.size() + 7) / 8 * 8, ' ');
    if (record.size() > kMaxRecordBytes)
      throw InputError(fmt::format("[data] {}: the tokenizer record is {} bytes, more than the {} "
                                   "a token file holds (is the tokenizer path that long?)",
                                   path, record.size(), kMaxRecordBytes));
  }
  const int width = width_for_vocab(vocab);

  unsigned char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  store_le<std::uint32_t>(header + 8, tokenizer ? kVersionRecord : kVersionPlain);
  store_le<std::uint32_t>(header + 12, static_cast<std::uint32_t>(width));
  store_le<std::uint64_t>(header + 16, tokens.size());
  store_le<std::uint32_t>(header + 24, static_cast<std::uint32_t>(vocab));
  store_le<std::uint32_t>(header + 28, static_cast<std::uint32_t>(record.size()));

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
  if (!record.empty() &&
      !write_all(fd, reinterpret_cast<const unsigned char*>(record.data()), record.size()))
    give_up("write");
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
