// Validation of a safetensors file's header (SafetensorsFile::from_bytes): the length prefix,
// UTF-8, JSON without duplicate keys or deep nesting, each tensor entry, the metadata, and the
// tiling of the data section by the tensors' byte ranges. The rules: include/normlab/safetensors.h.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/safetensors_detail.h"
#include "normlab/safetensors.h"

namespace normlab {

namespace safetensors_detail {

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

}  // namespace safetensors_detail

using namespace safetensors_detail;

namespace {

// Deepest nesting of arrays and objects in a header: the reference's JSON parser (serde_json)
// refuses a 128th level. A valid header needs 3; the limit also bounds the recursion of nlohmann's
// serializer when a message quotes a value (a 200 KB header of nested arrays overflowed the stack).
constexpr std::size_t kMaxNesting = 127;

// A JSON value in a message, cut short if long.
std::string brief(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
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

}  // namespace

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
    fail(file,
         "not a safetensors file (header length {} exceeds the {} bytes after the 8-byte "
         "length; file size {}{})",
         n, size - kPrefixBytes, size,
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

}  // namespace normlab
