// safetensors reader and writer; see include/normlab/safetensors.h for the format and the rules.
#include "normlab/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"
#include "normlab/errors.h"

namespace normlab {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data and normlab copies it as is");

// Keeps the header's order, so ties between empty tensors sort stably.
using Json = nlohmann::ordered_json;

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr std::size_t kPrefixBytes = 8;                 // u64 header length
// Deepest nesting of arrays and objects in a header: the reference's JSON parser (serde_json)
// refuses a 128th level. A valid header needs 3; the limit also bounds the recursion of nlohmann's
// serializer when a message quotes a value (a 200 KB header of nested arrays overflowed the stack).
constexpr std::size_t kMaxNesting = 127;

struct DTypeRow {
  DType dtype;
  std::string_view name;
  std::size_t bits;
};

// Indexed by the enum value; the order is checked below.
constexpr DTypeRow kDTypes[] = {
    {DType::BOOL, "BOOL", 8},
    {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6},
    {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::U8, "U8", 8},
    {DType::I8, "I8", 8},
    {DType::F8_E5M2, "F8_E5M2", 8},
    {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E8M0, "F8_E8M0", 8},
    {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::I16, "I16", 16},
    {DType::U16, "U16", 16},
    {DType::F16, "F16", 16},
    {DType::BF16, "BF16", 16},
    {DType::I32, "I32", 32},
    {DType::U32, "U32", 32},
    {DType::F32, "F32", 32},
    {DType::C64, "C64", 64},
    {DType::F64, "F64", 64},
    {DType::I64, "I64", 64},
    {DType::U64, "U64", 64},
};

constexpr bool dtype_table_in_enum_order() {
  for (std::size_t i = 0; i < std::size(kDTypes); ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return static_cast<std::size_t>(DType::U64) + 1 == std::size(kDTypes);
}
static_assert(dtype_table_in_enum_order());

const DTypeRow& dtype_row(DType dtype) {
  const auto i = static_cast<std::size_t>(dtype);
  NL_CHECK(i < std::size(kDTypes), "unknown DType value {}", i);
  return kDTypes[i];
}

std::string all_dtype_names() {
  std::string s;
  for (const auto& row : kDTypes) s += (s.empty() ? "" : ", ") + std::string(row.name);
  return s;
}

// A name or value as it appears in a message: quoted, control bytes escaped.
std::string show(std::string_view s) {
  std::string out = "'";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += ch;
  }
  return out + "'";
}

// A JSON value in a message, cut short if long.
std::string brief(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string shape_str(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

template <class... Args>
[[noreturn]] void fail(std::string_view file, fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(
      fmt::format("[safetensors] {}: {}", file, fmt::format(f, std::forward<Args>(args)...)));
}

template <class... Args>
[[noreturn]] void fail_tensor(std::string_view file, std::string_view tensor,
                              fmt::format_string<Args...> f, Args&&... args) {
  throw FormatError(fmt::format("[safetensors] {}: tensor {}: {}", file, show(tensor),
                                fmt::format(f, std::forward<Args>(args)...)));
}

// Offset of the first byte that is not well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or npos.
std::size_t invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // overlong
      if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // overlong
      if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (s.size() - i < len) return i;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < lo || c1 > hi) return i;
    for (std::size_t k = 2; k < len; ++k) {
      const auto ck = static_cast<unsigned char>(s[i + k]);
      if (ck < 0x80 || ck > 0xBF) return i;
    }
    i += len;
  }
  return std::string_view::npos;
}

// Parses the header text, rejecting duplicate keys at any depth (nlohmann would keep one of them
// silently, and so would the reference implementation for tensor names).
Json parse_header_json(std::string_view text, const std::string& file) {
  struct Frame {
    std::set<std::string> keys;
    std::string last_key;
  };
  std::vector<Frame> objects;  // the objects being parsed, outermost first
  std::size_t nesting = 0;     // arrays and objects open
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      if (++nesting > kMaxNesting)
        fail(file, "header nests arrays and objects deeper than {} levels", kMaxNesting);
    } else if (event == Json::parse_event_t::object_end ||
               event == Json::parse_event_t::array_end) {
      --nesting;
    }
    if (event == Json::parse_event_t::object_start) {
      objects.emplace_back();
    } else if (event == Json::parse_event_t::object_end) {
      objects.pop_back();
    } else if (event == Json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      Frame& top = objects.back();
      if (!top.keys.insert(key).second) {
        if (objects.size() == 1) fail(file, "duplicate key {} in header", show(key));
        if (objects[0].last_key == "__metadata__")
          fail(file, "__metadata__: duplicate key {}", show(key));
        fail_tensor(file, objects[0].last_key, "duplicate key {}", show(key));
      }
      top.last_key = key;
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    fail(file, "header is not valid JSON: {}", e.what());
  }
}

// Reads a JSON number that must be a non-negative integer (nlohmann stores those as unsigned;
// "-0" and every negative number come out signed, floats as floats).
std::optional<std::uint64_t> as_unsigned(const Json& v) {
  if (!v.is_number_unsigned()) return std::nullopt;
  return v.get<std::uint64_t>();
}

// Bytes of a tensor, exactly as the reference computes them: element count folded left to right
// with overflow checks, times the bit width, which must come to whole bytes.
struct ByteCount {
  bool overflow = false;
  bool partial_byte = false;
  std::uint64_t bytes = 0;
};

ByteCount byte_count(DType dtype, const std::vector<std::int64_t>& shape) {
  ByteCount r;
  std::uint64_t n = 1;
  for (const auto d : shape) {
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) {
      r.overflow = true;
      return r;
    }
  }
  std::uint64_t bits = 0;
  if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(dtype_bits(dtype)), &bits)) {
    r.overflow = true;
    return r;
  }
  r.partial_byte = bits % 8 != 0;
  r.bytes = bits / 8;
  return r;
}

TensorInfo parse_tensor_entry(const std::string& file, const std::string& name, const Json& entry) {
  if (name.empty()) fail(file, "a tensor has an empty name");
  if (!entry.is_object())
    fail_tensor(file, name, "entry must be an object with dtype, shape and data_offsets, but is {}",
                brief(entry));
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail_tensor(file, name,
                  "unknown field {} (an entry holds exactly dtype, shape, data_offsets)",
                  show(key));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) fail_tensor(file, name, "missing field '{}'", field);
  }

  TensorInfo info;
  info.name = name;

  const Json& dtype = entry["dtype"];
  const auto parsed_dtype =
      dtype.is_string() ? dtype_from_name(dtype.get_ref<const std::string&>()) : std::nullopt;
  if (!parsed_dtype)
    fail_tensor(file, name, "field 'dtype' is {}, not one of {}", brief(dtype), all_dtype_names());
  info.dtype = *parsed_dtype;

  const Json& shape = entry["shape"];
  if (!shape.is_array())
    fail_tensor(file, name, "field 'shape' must be an array of non-negative integers, but is {}",
                brief(shape));
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const auto d = as_unsigned(shape[i]);
    if (!d)
      fail_tensor(file, name,
                  "field 'shape' must be an array of non-negative integers, but element {} is {}",
                  i, brief(shape[i]));
    if (*d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail_tensor(file, name, "field 'shape': dimension {} is {}, beyond the int64 range", i, *d);
    info.shape.push_back(static_cast<std::int64_t>(*d));
  }

  const Json& offsets = entry["data_offsets"];
  const auto begin =
      offsets.is_array() && offsets.size() == 2 ? as_unsigned(offsets[0]) : std::nullopt;
  const auto end =
      offsets.is_array() && offsets.size() == 2 ? as_unsigned(offsets[1]) : std::nullopt;
  if (!begin || !end)
    fail_tensor(file, name,
                "field 'data_offsets' must be an array of 2 non-negative integers, but is {}",
                brief(offsets));
  info.begin = *begin;
  info.end = *end;
  if (info.begin > info.end)
    fail_tensor(file, name, "data_offsets [{}, {}] are reversed", info.begin, info.end);

  const ByteCount count = byte_count(info.dtype, info.shape);
  if (count.overflow)
    fail_tensor(file, name, "shape {} of dtype {} is too large: its size overflows 64 bits",
                shape_str(info.shape), dtype_name(info.dtype));
  if (count.partial_byte)
    fail_tensor(file, name, "shape {} of dtype {} is not a whole number of bytes",
                shape_str(info.shape), dtype_name(info.dtype));
  if (info.end - info.begin != count.bytes)
    fail_tensor(file, name,
                "data_offsets [{}, {}] span {} bytes but dtype {} with shape {} needs {}",
                info.begin, info.end, info.end - info.begin, dtype_name(info.dtype),
                shape_str(info.shape), count.bytes);
  return info;
}

std::map<std::string, std::string> parse_metadata(const std::string& file, const Json& value) {
  if (!value.is_object())
    fail(file, "__metadata__ must be an object of string to string, but is {}", brief(value));
  std::map<std::string, std::string> out;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail(file, "__metadata__: the value of key {} must be a string, but is {}", show(key),
           brief(v));
    out.emplace(key, v.get<std::string>());
  }
  return out;
}

// Tensors sorted by byte range must tile [0, data_len) exactly.
void check_tiling(const std::string& file, const std::vector<TensorInfo>& sorted,
                  std::uint64_t data_len) {
  std::uint64_t covered = 0;  // end of the previous tensor
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : sorted) {
    if (t.end > data_len)
      fail_tensor(file, t.name,
                  "data_offsets [{}, {}] run past the end of the data section ({} bytes)", t.begin,
                  t.end, data_len);
    if (t.begin < covered)
      fail_tensor(file, t.name, "data_offsets [{}, {}] overlap tensor {}, which ends at {}",
                  t.begin, t.end, show(previous->name), covered);
    if (t.begin > covered) {
      if (previous == nullptr)
        fail_tensor(file, t.name, "data_offsets [{}, {}] leave a gap: the data section starts at 0",
                    t.begin, t.end);
      fail_tensor(file, t.name,
                  "data_offsets [{}, {}] leave a gap after tensor {}, which ends at {}", t.begin,
                  t.end, show(previous->name), covered);
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != data_len)
    fail(file, "the data section has {} bytes but the tensors cover only {}: {} trailing bytes",
         data_len, covered, data_len - covered);
}

template <class T>
T load_le(const std::uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// dst[i] = convert(element i of type Src)
template <class Src, class Dst, class Convert>
void convert_elements(std::span<const std::uint8_t> src, std::span<Dst> dst, Convert convert) {
  for (std::size_t i = 0; i < dst.size(); ++i)
    dst[i] = convert(load_le<Src>(src.data() + i * sizeof(Src)));
}

template <class Dst>
bool convert_float(DType dtype, std::span<const std::uint8_t> src, std::span<Dst> dst) {
  switch (dtype) {
    case DType::F32:
      convert_elements<float>(src, dst, [](float x) { return static_cast<Dst>(x); });
      return true;
    case DType::F64:
      convert_elements<double>(src, dst, [](double x) { return static_cast<Dst>(x); });
      return true;
    case DType::F16:
      convert_elements<std::uint16_t>(
          src, dst, [](std::uint16_t x) { return static_cast<Dst>(f16_to_f32(x)); });
      return true;
    case DType::BF16:
      convert_elements<std::uint16_t>(
          src, dst, [](std::uint16_t x) { return static_cast<Dst>(bf16_to_f32(x)); });
      return true;
    default:
      return false;
  }
}

bool convert_int(DType dtype, std::span<const std::uint8_t> src, std::span<std::int64_t> dst) {
  auto widen = [](auto x) { return static_cast<std::int64_t>(x); };
  switch (dtype) {
    case DType::I64:
      convert_elements<std::int64_t>(src, dst, widen);
      return true;
    case DType::I32:
      convert_elements<std::int32_t>(src, dst, widen);
      return true;
    case DType::I16:
      convert_elements<std::int16_t>(src, dst, widen);
      return true;
    case DType::I8:
      convert_elements<std::int8_t>(src, dst, widen);
      return true;
    case DType::U32:
      convert_elements<std::uint32_t>(src, dst, widen);
      return true;
    case DType::U16:
      convert_elements<std::uint16_t>(src, dst, widen);
      return true;
    case DType::U8:
      convert_elements<std::uint8_t>(src, dst, widen);
      return true;
    default:
      return false;
  }
}

// The header, 8-byte length prefix included, of a file holding `tensors` in the order given.
std::vector<std::uint8_t> build_header(const std::vector<TensorToWrite>& tensors,
                                       const std::map<std::string, std::string>& metadata,
                                       std::string_view file) {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) {
      if (invalid_utf8_at(key) != std::string_view::npos ||
          invalid_utf8_at(value) != std::string_view::npos)
        fail(file, "__metadata__: key {} or its value is not valid UTF-8", show(key));
      meta[key] = value;
    }
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) fail(file, "cannot write a tensor with an empty name");
    if (t.name == "__metadata__") fail(file, "cannot write a tensor named '__metadata__'");
    if (invalid_utf8_at(t.name) != std::string_view::npos)
      fail_tensor(file, t.name, "the name is not valid UTF-8");
    if (header.contains(t.name)) fail_tensor(file, t.name, "the name is given twice");
    for (std::size_t i = 0; i < t.shape.size(); ++i) {
      if (t.shape[i] < 0)
        fail_tensor(file, t.name, "shape {}: dimension {} is negative", shape_str(t.shape), i);
    }
    const ByteCount count = byte_count(t.dtype, t.shape);
    if (count.overflow || count.partial_byte)
      fail_tensor(file, t.name, "shape {} of dtype {} is not a whole number of bytes below 2^64",
                  shape_str(t.shape), dtype_name(t.dtype));
    if (t.bytes.size() != count.bytes)
      fail_tensor(file, t.name, "{} bytes given but dtype {} with shape {} needs {}",
                  t.bytes.size(), dtype_name(t.dtype), shape_str(t.shape), count.bytes);
    Json entry = Json::object();
    entry["dtype"] = std::string(dtype_name(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = Json::array({offset, offset + count.bytes});
    header[t.name] = std::move(entry);
    offset += count.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-aligned
  if (text.size() > kMaxHeaderBytes)
    fail(file, "the header would be {} bytes, over the limit of {}", text.size(), kMaxHeaderBytes);

  std::vector<std::uint8_t> out(kPrefixBytes + text.size());
  const std::uint64_t n = text.size();
  std::memcpy(out.data(), &n, kPrefixBytes);
  std::memcpy(out.data() + kPrefixBytes, text.data(), text.size());
  return out;
}

}  // namespace

std::size_t dtype_bits(DType dtype) { return dtype_row(dtype).bits; }

std::size_t dtype_size(DType dtype) {
  const std::size_t bits = dtype_bits(dtype);
  NL_CHECK(bits % 8 == 0, "dtype {} has {} bits per element, not a whole number of bytes",
           dtype_name(dtype), bits);
  return bits / 8;
}

std::string_view dtype_name(DType dtype) { return dtype_row(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kDTypes)
    if (row.name == name) return row.dtype;
  return std::nullopt;
}

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // infinity, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: mant * 2^-24. Shift the leading 1 up to bit 10 (the implicit bit) and lower the
    // exponent to match: value = 1.f * 2^(-14 - shift).
    const int shift = std::countl_zero(mant) - 21;
    bits = sign | (static_cast<std::uint32_t>(127 - 14 - shift) << 23) |
           (((mant << shift) & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

std::uint16_t f32_to_f16(float f) {
  const auto x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff)  // infinity, or NaN: keep it quiet and keep the top payload bits
    return sign | 0x7c00u | (mant != 0 ? 0x200u | (mant >> 13) : 0u);
  const int e = static_cast<int>(exp) - 127 + 15;  // biased f16 exponent
  if (e >= 0x1f) return sign | 0x7c00u;            // overflow
  std::uint32_t r, rest, half;
  if (e <= 0) {
    // f16 subnormal, unit 2^-24: value = (1.m * 2^23) >> (14 - e).
    if (e < -10) return sign;  // below half the smallest subnormal
    mant |= 0x800000u;
    const int shift = 14 - e;
    r = mant >> shift;
    rest = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    r = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
    rest = mant & 0x1fffu;
    half = 0x1000u;
  }
  if (rest > half || (rest == half && (r & 1u))) ++r;  // a carry may give the next exponent or inf
  return static_cast<std::uint16_t>(sign | r);
}

std::uint16_t f32_to_bf16(float f) {
  std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(x >> 16);
}

std::int64_t TensorInfo::numel() const {
  // Unsigned, as validation computed it: partial products may pass INT64_MAX before a zero
  // dimension (shape [2^62, 4, 0]); the final product of a validated tensor is small.
  std::uint64_t n = 1;
  for (const auto d : shape) n *= static_cast<std::uint64_t>(d);
  return static_cast<std::int64_t>(n);
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(path, "cannot open: {}", std::strerror(err));
  }
  std::vector<std::uint8_t> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > 0) bytes.reserve(static_cast<std::size_t>(st.st_size));
  std::uint8_t buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      fail(path, "cannot read: {}", std::strerror(err));
    }
    bytes.insert(bytes.end(), buf, buf + n);
  }
  ::close(fd);
  return from_bytes(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::uint8_t> bytes, std::string name) {
  SafetensorsFile f;
  f.name_ = std::move(name);
  f.bytes_ = std::move(bytes);
  const std::string& file = f.name_;
  const std::uint64_t size = f.bytes_.size();

  if (size < kPrefixBytes)
    fail(file, "file is {} bytes, shorter than the 8-byte header length", size);
  const auto n = load_le<std::uint64_t>(f.bytes_.data());
  // Checked before the limit: a file of text says "header length 7e18" here, and the user should
  // hear first that it is no safetensors file at all.
  if (n > size - kPrefixBytes)
    fail(file, "not a safetensors file (header length {} exceeds the {} bytes after the 8-byte "
         "length; file size {}{})", n, size - kPrefixBytes, size,
         n > kMaxHeaderBytes ? fmt::format(", header limit {}", kMaxHeaderBytes) : "");
  if (n > kMaxHeaderBytes)
    fail(file, "header length {} is over the limit of {} bytes", n, kMaxHeaderBytes);
  f.data_start_ = kPrefixBytes + n;

  const std::string_view text(reinterpret_cast<const char*>(f.bytes_.data() + kPrefixBytes), n);
  if (const auto at = invalid_utf8_at(text); at != std::string_view::npos)
    fail(file, "header is not valid UTF-8 (byte {} of the header)", at);
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0garbage" would parse.
  // Valid JSON holds no raw NUL anywhere (inside strings it must be escaped).
  if (const auto at = text.find('\0'); at != std::string_view::npos)
    fail(file, "header has a NUL byte at offset {}, which JSON does not allow", at);
  const Json header = parse_header_json(text, file);
  if (!header.is_object())
    fail(file, "header must be a JSON object, but is {}", header.type_name());
  // Reference rule (not yet enforced by the reference itself): no whitespace or BOM before '{'.
  if (text.empty() || text.front() != '{')
    fail(file, "header must begin with '{{' but begins with byte 0x{:02x}",
         static_cast<unsigned char>(text.front()));

  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__")
      f.metadata_ = parse_metadata(file, value);
    else
      f.tensors_.push_back(parse_tensor_entry(file, key, value));
  }
  std::stable_sort(f.tensors_.begin(), f.tensors_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(file, f.tensors_, size - f.data_start_);
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_.emplace(f.tensors_[i].name, i);
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::uint8_t> SafetensorsFile::data(const TensorInfo& info) const {
  NL_CHECK(info.begin <= info.end && info.end <= bytes_.size() - data_start_,
           "tensor '{}' [{}, {}) is not a tensor of {}", info.name, info.begin, info.end, name_);
  return {bytes_.data() + data_start_ + info.begin, info.end - info.begin};
}

const TensorInfo& SafetensorsFile::checked_tensor(
    std::string_view name, std::size_t dst_size,
    const std::optional<std::vector<std::int64_t>>& expected_shape, const char* reader) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) fail_tensor(name_, name, "not found ({} asked for it)", reader);
  if (expected_shape && *expected_shape != info->shape)
    fail_tensor(name_, name, "shape is {} but {} was expected", shape_str(info->shape),
                shape_str(*expected_shape));
  if (static_cast<std::uint64_t>(info->numel()) != dst_size)
    fail_tensor(name_, name, "has {} elements (shape {}) but the destination holds {}",
                info->numel(), shape_str(info->shape), dst_size);
  return *info;
}

void SafetensorsFile::read_f32(
    std::string_view name, std::span<float> dst,
    const std::optional<std::vector<std::int64_t>>& expected_shape) const {
  const TensorInfo& info = checked_tensor(name, dst.size(), expected_shape, "read_f32");
  if (!convert_float(info.dtype, data(info), dst))
    fail_tensor(name_, name, "dtype is {}; read_f32 reads F32, F64, F16 or BF16",
                dtype_name(info.dtype));
}

void SafetensorsFile::read_f64(
    std::string_view name, std::span<double> dst,
    const std::optional<std::vector<std::int64_t>>& expected_shape) const {
  const TensorInfo& info = checked_tensor(name, dst.size(), expected_shape, "read_f64");
  if (!convert_float(info.dtype, data(info), dst))
    fail_tensor(name_, name, "dtype is {}; read_f64 reads F64, F32, F16 or BF16",
                dtype_name(info.dtype));
}

void SafetensorsFile::read_i64(
    std::string_view name, std::span<std::int64_t> dst,
    const std::optional<std::vector<std::int64_t>>& expected_shape) const {
  const TensorInfo& info = checked_tensor(name, dst.size(), expected_shape, "read_i64");
  if (!convert_int(info.dtype, data(info), dst))
    fail_tensor(name_, name, "dtype is {}; read_i64 reads I64, I32, I16, I8, U32, U16 or U8",
                dtype_name(info.dtype));
}

std::vector<std::uint8_t> serialize_safetensors(
    const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<std::uint8_t> out = build_header(tensors, metadata, "<memory>");
  for (const TensorToWrite& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before touching the file system.
  const std::vector<std::uint8_t> head = build_header(tensors, metadata, path);
  std::vector<std::span<const std::uint8_t>> parts = {head};
  for (const TensorToWrite& t : tensors) parts.push_back(t.bytes);
  write_file_atomic(path, parts, "[safetensors]");
}

}  // namespace normlab
