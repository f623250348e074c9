// Internal: the storage behind TokenCorpus and CorpusView. Tokens are unsigned little-endian
// integers of `width` bytes at `data`; the store owns them (a string), maps them (a token file)
// or borrows them (the embedded corpus).
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace normlab::detail {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and normlab reads them as is");
static_assert(sizeof(long) == 8, "token counts and offsets are held in a 64-bit long");

struct TokenStore {
  std::string name;                    // file path or given name, for messages
  const unsigned char* data = nullptr;  // (count * width) bytes
  int width = 1;                       // bytes per token: 1, 2 or 4
  long count = 0;
  int vocab = 0;
  std::string owned;          // the bytes, when the store owns them (then data == owned.data())
  void* map_addr = nullptr;   // the mapping, when memory-mapped (header included)
  std::size_t map_len = 0;

  TokenStore() = default;
  TokenStore(const TokenStore&) = delete;
  TokenStore& operator=(const TokenStore&) = delete;
  ~TokenStore();

  int at(long i) const {
    switch (width) {
      case 1:
        return data[i];
      case 2: {
        std::uint16_t v;
        std::memcpy(&v, data + 2 * i, 2);
        return v;
      }
      default: {
        std::uint32_t v;
        std::memcpy(&v, data + 4 * i, 4);
        return static_cast<int>(v);  // < vocab <= INT32_MAX, checked on open
      }
    }
  }

  void copy(long begin, long n, int* dst) const;
};

}  // namespace normlab::detail
