// Writing safetensors files: the header built and checked from the tensors to write (names,
// shapes, byte counts, UTF-8), then the file in memory or written atomically (io/atomic_file.h).
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/atomic_file.h"
#include "io/safetensors_detail.h"
#include "normlab/safetensors.h"

namespace normlab {

using namespace safetensors_detail;

namespace {

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
