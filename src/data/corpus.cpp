// TokenCorpus and CorpusView: loading text (a file or a folder), the embedded corpus, and the
// train/validation split. Token files live in token_file.cpp.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "data/text_check.h"
#include "data/token_store.h"
#include "normlab/data.h"
#include "normlab/errors.h"

namespace normlab {
namespace detail {

TokenStore::~TokenStore() {
  if (map_addr) ::munmap(map_addr, map_len);
}

void TokenStore::copy(long begin, long n, int* dst) const {
  const unsigned char* p = data + begin * width;
  switch (width) {
    case 1:
      for (long i = 0; i < n; ++i) dst[i] = p[i];
      break;
    case 2:
      for (long i = 0; i < n; ++i) {
        std::uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        dst[i] = v;
      }
      break;
    default:
      for (long i = 0; i < n; ++i) {
        std::uint32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        dst[i] = static_cast<int>(v);
      }
  }
}

}  // namespace detail

namespace {

namespace fs = std::filesystem;

// Whole file, read with POSIX calls so the error carries errno's reason.
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw FormatError(fmt::format("[data] {}: cannot open: {}", path, std::strerror(errno)));
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw FormatError(fmt::format("[data] {}: cannot read: {}", path, std::strerror(err)));
    }
    bytes.append(buf, static_cast<std::size_t>(got));
  }
  ::close(fd);
  return bytes;
}

// A token file is recognised by its magic, whatever its name.
bool is_token_file(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  return f.gcount() == 8 && std::string(magic, 8) == "NLTOKENS";
}

bool is_hidden(const fs::path& p) {
  const std::string name = p.filename().string();
  return !name.empty() && name[0] == '.';
}

// Regular files below `dir`, recursively, hidden files and folders skipped, sorted by path.
std::vector<fs::path> text_files_below(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (is_hidden(p)) {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file(ec)) files.push_back(p);  // follows a symlink to a file
  }
  if (ec)
    throw FormatError(fmt::format("[data] {}: cannot list folder: {}", dir.string(), ec.message()));
  std::sort(files.begin(), files.end());
  return files;
}

std::shared_ptr<detail::TokenStore> byte_store(std::string name) {
  auto store = std::make_shared<detail::TokenStore>();
  store->name = std::move(name);
  store->width = 1;
  store->vocab = ByteTokenizer::kVocabSize;
  return store;
}

}  // namespace

// --- CorpusView -------------------------------------------------------------------------------

int CorpusView::vocab_size() const { return store_ ? store_->vocab : 0; }

const std::string& CorpusView::name() const {
  static const std::string none = "(empty view)";
  return store_ ? store_->name : none;
}

int CorpusView::token(long i) const {
  NL_CHECK(i >= 0 && i < size_, "{}: token {} outside a view of {} tokens", name(), i, size_);
  return store_->at(begin_ + i);
}

void CorpusView::copy(long begin, long n, int* dst) const {
  NL_CHECK(begin >= 0 && n >= 0 && begin <= size_ - n, "{}: tokens [{}, {}) outside a view of {}",
           name(), begin, begin + n, size_);
  store_->copy(begin_ + begin, n, dst);
}

CorpusView CorpusView::slice(long begin, long n) const {
  NL_CHECK(begin >= 0 && n >= 0 && begin <= size_ - n, "{}: slice [{}, {}) outside a view of {}",
           name(), begin, begin + n, size_);
  return CorpusView(store_, begin_ + begin, n);
}

// --- TokenCorpus ------------------------------------------------------------------------------

TokenCorpus::TokenCorpus(std::shared_ptr<const detail::TokenStore> store)
    : view_(store, 0, store->count) {}

TokenCorpus TokenCorpus::from_text(std::string_view text, std::string name) {
  detail::check_text(text, name);
  auto store = byte_store(std::move(name));
  store->owned.assign(text);
  store->data = reinterpret_cast<const unsigned char*>(store->owned.data());
  store->count = static_cast<long>(store->owned.size());
  return TokenCorpus(std::move(store));
}

TokenCorpus TokenCorpus::from_path(const std::string& path) {
  if (path.empty()) return embedded();
  if (is_token_file(path)) return from_token_file(path);
  return from_text_path(path);
}

TokenCorpus TokenCorpus::from_path(const std::string& path, const Tokenizer& tok) {
  if (dynamic_cast<const ByteTokenizer*>(&tok)) return from_path(path);
  if (!path.empty() && is_token_file(path)) return from_token_file(path);
  if (path.empty()) {
    const std::string_view text = embedded_corpus();
    return from_documents({TextDocument{"embedded:wordnet_glosses", std::string(text)}},
                          "embedded:wordnet_glosses", tok);
  }
  return from_documents(read_text_documents(path), path, tok);
}

std::vector<TextDocument> read_text_documents(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    throw FormatError(fmt::format("[data] {}: no such file or folder", path));
  std::vector<TextDocument> docs;
  if (fs::is_regular_file(st)) {
    std::string text = read_file(path);
    detail::check_text(text, path);
    docs.push_back({path, std::move(text)});
    return docs;
  }
  if (!fs::is_directory(st))
    throw FormatError(fmt::format("[data] {}: neither a regular file nor a folder", path));
  for (const fs::path& file : text_files_below(path)) {
    std::string text = read_file(file.string());
    if (text.empty()) continue;  // contributes nothing, not even a separator
    detail::check_text(text, file.string());
    docs.push_back({file.string(), std::move(text)});
  }
  if (docs.empty())
    throw FormatError(fmt::format(
        "[data] {}: empty: the folder holds no non-empty, non-hidden files", path));
  return docs;
}

TokenCorpus TokenCorpus::from_text_path(const std::string& path) {
  std::vector<TextDocument> docs = read_text_documents(path);
  std::string all = std::move(docs[0].text);
  for (std::size_t i = 1; i < docs.size(); ++i) {
    all += '\n';
    all += docs[i].text;
  }
  auto store = byte_store(path);
  store->owned = std::move(all);
  store->data = reinterpret_cast<const unsigned char*>(store->owned.data());
  store->count = static_cast<long>(store->owned.size());
  return TokenCorpus(std::move(store));
}

TokenCorpus TokenCorpus::from_documents(const std::vector<TextDocument>& docs, std::string name,
                                        const Tokenizer& tok) {
  std::vector<std::string_view> texts;
  for (const TextDocument& d : docs) texts.push_back(d.text);
  const std::vector<std::vector<int>> ids = tok.encode_batch(texts);
  const std::vector<int> sep = docs.size() > 1 ? document_separator(tok) : std::vector<int>();
  long n = 0;
  for (const auto& v : ids) n += static_cast<long>(v.size());
  n += static_cast<long>(sep.size()) * static_cast<long>(ids.size() - 1);
  if (n == 0) throw FormatError(fmt::format("[data] {}: the tokenizer made no tokens of it", name));
  const int vocab = tok.vocab_size();
  auto store = std::make_shared<detail::TokenStore>();
  store->name = std::move(name);
  store->vocab = vocab;
  store->width = vocab <= 256 ? 1 : vocab <= 65536 ? 2 : 4;
  store->owned.resize(static_cast<std::size_t>(n) * store->width);
  unsigned char* out = reinterpret_cast<unsigned char*>(store->owned.data());
  long at = 0;
  auto put = [&](int t) {
    const std::uint32_t v = static_cast<std::uint32_t>(t);
    std::memcpy(out + at * store->width, &v, store->width);  // little-endian (token_store.h)
    ++at;
  };
  for (std::size_t d = 0; d < ids.size(); ++d) {
    if (d > 0)
      for (int t : sep) put(t);
    for (int t : ids[d]) put(t);
  }
  store->data = out;
  store->count = n;
  return TokenCorpus(std::move(store));
}

std::vector<int> document_separator(const Tokenizer& tok) {
  const int V = tok.vocab_size();
  if (const std::optional<int> eos = tok.special().eos; eos && *eos >= 0 && *eos < V) return {*eos};
  // Tokenizers without an EOS of their own (GPT-2's tokenizer.json, Llama 3's template has only
  // its BOS) still end documents with a special token of one of these names.
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"})
    if (const std::optional<int> id = tok.token_to_id(name); id && tok.is_special(*id)) return {*id};
  return tok.encode("\n");
}

TokenCorpus TokenCorpus::embedded() {
  const std::string_view text = embedded_corpus();
  auto store = byte_store("embedded:wordnet_glosses");
  store->data = reinterpret_cast<const unsigned char*>(text.data());  // static storage
  store->count = static_cast<long>(text.size());
  return TokenCorpus(std::move(store));
}

CorpusSplit TokenCorpus::split(double val_fraction, int seq_len) const {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw InputError(fmt::format(
        "[data] {}: validation fraction {} must lie strictly between 0 and 1", name(),
        val_fraction));
  if (seq_len < 1)
    throw InputError(fmt::format("[data] {}: sequence length {} must be at least 1", name(),
                                 seq_len));
  const long n = size();
  const long n_val = std::llround(static_cast<double>(n) * val_fraction);
  const long n_train = n - n_val;
  const long need = static_cast<long>(seq_len) + 1;
  if (n_train < need || n_val < need)
    throw InputError(fmt::format(
        "[data] {}: corpus too small for the split and sequence length: {} tokens with "
        "validation fraction {} give {} train and {} validation tokens, and each part needs at "
        "least seq_len + 1 = {}",
        name(), n, val_fraction, n_train, n_val, need));
  return {view_.slice(0, n_train), view_.slice(n_train, n_val)};
}

}  // namespace normlab
