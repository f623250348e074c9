// Reading safetensors files: the whole file into memory (validated by from_bytes,
// safetensors_header.cpp), lookup of a tensor by name, its raw bytes, and copies converted to
// float, double or int64.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/safetensors_detail.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace normlab {

using namespace safetensors_detail;

namespace {

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

}  // namespace

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

}  // namespace normlab
