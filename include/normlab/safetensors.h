// Reading and writing safetensors files (https://github.com/huggingface/safetensors), the format
// normlab uses for checkpoints and for exchanging tensors with the PyTorch oracle.
//
// Layout: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON header, then the data section.
// The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (byte range
// within the data section) and may hold "__metadata__", an object of string -> string.
//
// The reader is at least as strict as the reference implementation: every file it accepts, the
// reference accepts too, with the same bytes (tests/py/test_safetensors_reference.py checks this).
// It is stricter in a few places, on purpose: it rejects duplicate keys anywhere in the header
// (the reference keeps the last tensor of a duplicated name), unknown fields in a tensor entry, an
// empty tensor name, a "__metadata__" that is not an object (the reference takes null for none), a
// header that does not begin with '{', dimensions above INT64_MAX, and the alternative forms serde
// accepts: a tensor entry written as the array [dtype, shape, data_offsets] and a dtype written
// as {"F32": null}. Every violation throws FormatError naming the file,
// the tensor and the field; nothing is read out of bounds.
//
// The writer is atomic: it writes "<path>.tmp.<pid>", fsyncs it, renames it over the target and
// fsyncs the directory, so `path` holds either the old file or the complete new one
// (src/io/atomic_file.h).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

// Element types of the safetensors format (all those of the reference implementation).
// F4 and F6_* are sub-byte types: dtype_bits() is 4 or 6 and dtype_size() refuses them.
enum class DType {
  BOOL,
  F4,
  F6_E2M3,
  F6_E3M2,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  C64,
  F64,
  I64,
  U64,
};

std::size_t dtype_bits(DType dtype);
// Bytes per element; throws InternalError for the sub-byte types F4, F6_E2M3, F6_E3M2.
std::size_t dtype_size(DType dtype);
// The name used in the header: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);
// Inverse of dtype_name; nullopt for an unknown name (names are case-sensitive, as in the format).
std::optional<DType> dtype_from_name(std::string_view name);

// IEEE binary16 and bfloat16 <-> binary32. The widening conversions are exact (subnormals, signed
// zeros, infinities and NaN payloads kept); the narrowing ones round to nearest, ties to even,
// overflow to infinity, and keep NaN a NaN.
float f16_to_f32(std::uint16_t h);
float bf16_to_f32(std::uint16_t b);
std::uint16_t f32_to_f16(float f);
std::uint16_t f32_to_bf16(float f);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;  // [] for a scalar
  std::uint64_t begin, end;         // byte range [begin, end) within the data section

  // Product of the shape (1 for a scalar); fits in int64 for every tensor of a validated file.
  std::int64_t numel() const;
};

// A safetensors file held in memory and fully validated on construction.
class SafetensorsFile {
 public:
  // Reads the whole file; throws FormatError if it cannot be read or is not a valid file.
  static SafetensorsFile open(const std::string& path);
  // `name` stands for the file in error messages.
  static SafetensorsFile from_bytes(std::vector<std::uint8_t> bytes, std::string name = "<memory>");

  const std::string& name() const { return name_; }
  // All tensors, ordered by their byte range (ties, i.e. empty tensors, in header order).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr if there is no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // The raw little-endian bytes of a tensor of this file.
  std::span<const std::uint8_t> data(const TensorInfo& info) const;
  // "__metadata__"; empty if the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Copy tensor `name` into `dst`, converting the element type:
  //   read_f32, read_f64: from F32, F64, F16, BF16;
  //   read_i64: from I64, I32, I16, I8, U32, U16, U8.
  // Throws FormatError if the tensor is missing, has another dtype, has a shape other than
  // `expected_shape` (when given; the message names both shapes), or does not have exactly
  // dst.size() elements.
  void read_f32(
      std::string_view name, std::span<float> dst,
      const std::optional<std::vector<std::int64_t>>& expected_shape = std::nullopt) const;
  void read_f64(
      std::string_view name, std::span<double> dst,
      const std::optional<std::vector<std::int64_t>>& expected_shape = std::nullopt) const;
  void read_i64(
      std::string_view name, std::span<std::int64_t> dst,
      const std::optional<std::vector<std::int64_t>>& expected_shape = std::nullopt) const;

 private:
  SafetensorsFile() = default;
  const TensorInfo& checked_tensor(std::string_view name, std::size_t dst_size,
                                   const std::optional<std::vector<std::int64_t>>& expected_shape,
                                   const char* reader) const;

  std::string name_;
  std::vector<std::uint8_t> bytes_;  // the whole file
  std::uint64_t data_start_ = 0;     // 8 + header length
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `bytes` must hold exactly numel * dtype_bits / 8 little-endian bytes.
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::span<const std::uint8_t> bytes;
};

// The complete file: header padded with spaces to a multiple of 8 bytes (so the data section
// starts 8-aligned), tensors laid out in the order given. Throws FormatError for an empty,
// duplicate or "__metadata__" name, a negative dimension, a byte count that does not match the
// shape, or a name or metadata string that is not valid UTF-8.
std::vector<std::uint8_t> serialize_safetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});

// Atomically writes the file serialize_safetensors describes to `path`. Everything is validated
// before any file is touched; on an I/O failure throws Error, removes the temporary file and
// leaves `path` as it was.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace normlab
