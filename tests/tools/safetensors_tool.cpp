// Driver for tests/py/test_safetensors_reference.py: validates safetensors files with normlab's
// reader and prints what it found, one JSON line per file, so the test can compare it with the
// reference implementation.
//
//   safetensors_tool check FILE...
//     {"ok": true, "tensors": {NAME: {"dtype": "F32", "shape": [2, 3], "hex": "0000803f..."}},
//      "metadata": {...}}
//     {"ok": false, "kind": "FormatError", "error": "[safetensors] FILE: ..."}
//   Exit status 0 whatever the files hold; 2 for a usage error.
//
//   safetensors_tool copy IN OUT
//     Reads IN and writes its tensors (in offset order) and metadata to OUT with normlab's writer;
//     exit status 1 with the error on stderr if IN is rejected.
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "normlab/errors.h"
#include "normlab/safetensors.h"

namespace {

std::string hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * bytes.size());
  for (const std::uint8_t b : bytes) {
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

nlohmann::json check(const std::string& path) {
  nlohmann::json out;
  try {
    const auto file = normlab::SafetensorsFile::open(path);
    nlohmann::json tensors = nlohmann::json::object();
    for (const auto& t : file.tensors()) {
      tensors[t.name] = {{"dtype", std::string(normlab::dtype_name(t.dtype))},
                         {"shape", t.shape},
                         {"hex", hex(file.data(t))}};
    }
    out = {{"ok", true}, {"tensors", tensors}, {"metadata", file.metadata()}};
  } catch (const normlab::FormatError& e) {
    out = {{"ok", false}, {"kind", "FormatError"}, {"error", e.what()}};
  } catch (const std::exception& e) {  // anything else is a bug the test must see
    out = {{"ok", false}, {"kind", "other"}, {"error", e.what()}};
  }
  return out;
}

int copy(const std::string& in, const std::string& out) {
  try {
    const auto file = normlab::SafetensorsFile::open(in);
    std::vector<normlab::TensorToWrite> tensors;
    for (const auto& t : file.tensors())
      tensors.push_back({t.name, t.dtype, t.shape, file.data(t)});
    normlab::write_safetensors(out, tensors, file.metadata());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "copy" && argc == 4) return copy(argv[2], argv[3]);
  if (command != "check" || argc < 3) {
    std::fprintf(stderr, "usage: %s check FILE... | %s copy IN OUT\n", argv[0], argv[0]);
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string line =
        check(argv[i]).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::printf("%s\n", line.c_str());
  }
  return 0;
}
