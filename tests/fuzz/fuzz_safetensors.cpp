// Fuzz target: the safetensors reader on arbitrary bytes.
//
// Properties: SafetensorsFile::from_bytes either throws normlab::Error (FormatError) or accepts;
// for an accepted file every tensor is found by name, its data span has the size the dtype and
// shape give, and it reads through read_f32/read_f64 (F32, F64, F16, BF16) or read_i64 (integer
// dtypes) with the expected shape; a read of the wrong kind throws FormatError; the writer accepts
// what the reader accepted and its output reads back with the same tensors, bytes and metadata.
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "fuzz_check.h"
#include "normlab/safetensors.h"

using namespace normlab;

namespace {

bool is_float(DType d) {
  return d == DType::F32 || d == DType::F64 || d == DType::F16 || d == DType::BF16;
}

bool is_int(DType d) {
  return d == DType::I64 || d == DType::I32 || d == DType::I16 || d == DType::I8 ||
         d == DType::U32 || d == DType::U16 || d == DType::U8;
}

void read_every_tensor(const SafetensorsFile& f) {
  for (const TensorInfo& t : f.tensors()) {
    FUZZ_CHECK(f.find(t.name) == &t);
    const auto bytes = f.data(t);
    FUZZ_CHECK(bytes.size() == t.end - t.begin);
    const auto n = static_cast<std::size_t>(t.numel());
    FUZZ_CHECK(n * dtype_bits(t.dtype) == bytes.size() * 8);
    if (is_float(t.dtype)) {
      std::vector<float> f32(n);
      f.read_f32(t.name, f32, t.shape);
      std::vector<double> f64(n);
      f.read_f64(t.name, f64, t.shape);
      if (t.dtype != DType::F64) {  // both widen exactly; NaN stays NaN
        for (std::size_t i = 0; i < n; ++i)
          FUZZ_CHECK(static_cast<double>(f32[i]) == f64[i] || (f32[i] != f32[i] && f64[i] != f64[i]));
      }
      std::vector<std::int64_t> i64(n);
      FUZZ_CHECK(!accepts([&] { f.read_i64(t.name, i64); }));
    } else if (is_int(t.dtype)) {
      std::vector<std::int64_t> i64(n);
      f.read_i64(t.name, i64, t.shape);
      if (t.dtype == DType::I64 && n > 0) FUZZ_CHECK(std::memcmp(i64.data(), bytes.data(), 8) == 0);
      std::vector<float> f32(n);
      FUZZ_CHECK(!accepts([&] { f.read_f32(t.name, f32); }));
    }
    // A destination one element too large is refused whatever the dtype.
    std::vector<float> wrong(n + 1);
    FUZZ_CHECK(!accepts([&] { f.read_f32(t.name, wrong); }));
  }
}

// Writer <-> reader: what the reader accepts, the writer writes, and it reads back the same.
void round_trip(const SafetensorsFile& f) {
  std::vector<TensorToWrite> out;
  for (const TensorInfo& t : f.tensors()) out.push_back({t.name, t.dtype, t.shape, f.data(t)});
  std::vector<std::uint8_t> bytes = serialize_safetensors(out, f.metadata());
  const SafetensorsFile g = SafetensorsFile::from_bytes(std::move(bytes), "round trip");
  FUZZ_CHECK(g.tensors().size() == f.tensors().size());
  FUZZ_CHECK(g.metadata() == f.metadata());
  for (const TensorInfo& t : f.tensors()) {
    const TensorInfo* u = g.find(t.name);
    FUZZ_CHECK(u != nullptr && u->dtype == t.dtype && u->shape == t.shape);
    const auto a = f.data(t), b = g.data(*u);
    FUZZ_CHECK(a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::optional<SafetensorsFile> f;
  if (!accepts([&] { f.emplace(SafetensorsFile::from_bytes({data, data + size}, "fuzz")); }))
    return 0;  // refused with a FormatError: fine
  // Accepted: from here on any exception at all is a bug and crashes.
  read_every_tensor(*f);
  round_trip(*f);
  return 0;
}
