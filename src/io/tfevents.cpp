#include "io/tfevents.h"

#include <array>
#include <cstring>

#include <fmt/format.h>

#include "normlab/errors.h"

namespace normlab {

namespace {

std::array<std::uint32_t, 256> crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

// Protocol-buffer wire format: varints, and fields as (number << 3 | wire type).
void varint(std::string& s, std::uint64_t v) {
  while (v >= 0x80) {
    s.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s.push_back(static_cast<char>(v));
}
void key(std::string& s, int field, int wire) { varint(s, static_cast<std::uint64_t>(field) << 3 | wire); }
template <class T>
void fixed(std::string& s, T v) {  // little-endian, as the hosts normlab builds on
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  s.append(b, sizeof(T));
}
void bytes(std::string& s, int field, std::string_view v) {
  key(s, field, 2);
  varint(s, v.size());
  s.append(v);
}

}  // namespace

std::uint32_t crc32c(std::string_view data) {
  static const auto table = crc_table();
  std::uint32_t c = 0xffffffffu;
  for (const char ch : data) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(std::string_view data) {
  const std::uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TfEventsWriter::TfEventsWriter(const std::string& path, double wall_time)
    : path_(path), out_(path, std::ios::binary | std::ios::trunc) {
  if (!out_) throw FormatError(fmt::format("[tensorboard] cannot write {}", path));
  std::string ev;
  key(ev, 1, 1);
  fixed(ev, wall_time);
  bytes(ev, 3, "brain.Event:2");
  record(ev);
}

void TfEventsWriter::scalars(long step, double wall_time,
                             const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes(value, 1, tag);
    key(value, 2, 5);
    fixed(value, v);
    bytes(summary, 1, value);
  }
  std::string ev;
  key(ev, 1, 1);
  fixed(ev, wall_time);
  key(ev, 2, 0);
  varint(ev, static_cast<std::uint64_t>(step));
  bytes(ev, 5, summary);
  record(ev);
}

void TfEventsWriter::record(const std::string& event) {
  std::string len;
  fixed(len, static_cast<std::uint64_t>(event.size()));
  std::string rec = len;
  fixed(rec, masked_crc32c(len));
  rec += event;
  fixed(rec, masked_crc32c(event));
  out_.write(rec.data(), static_cast<std::streamsize>(rec.size()));
  if (!out_) throw FormatError(fmt::format("[tensorboard] cannot write {}", path_));
}

void TfEventsWriter::close() {
  out_.flush();
  if (!out_) throw FormatError(fmt::format("[tensorboard] cannot write {}", path_));
  out_.close();
}

}  // namespace normlab
