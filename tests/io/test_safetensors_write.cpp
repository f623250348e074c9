// Tests of the safetensors writer: write_safetensors replaces a file atomically and leaves no
// temporary file, a refused input or an I/O failure leaves the existing file as it was, and
// serialize_safetensors refuses bad input before anything is written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "safetensors_fixtures.h"

namespace normlab {
namespace {

using test::as_bytes;
using test::Bytes;

class SafetensorsWrite : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("normlab_st_{}_{}", ::getpid(),
                       testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  static Bytes read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsWrite, WritesAtomicallyAndLeavesNoTempFile) {
  const std::vector<float> x = {1, 2, 3};
  const std::string path = dir_ / "w.safetensors";
  write_safetensors(path, {{"x", DType::F32, {3}, as_bytes(x)}}, {{"step", "1"}});
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  EXPECT_EQ(read(path),
            serialize_safetensors({{"x", DType::F32, {3}, as_bytes(x)}}, {{"step", "1"}}));
  const auto f = SafetensorsFile::open(path);
  std::vector<float> back(3);
  f.read_f32("x", back, {{3}});
  EXPECT_EQ(back, x);
  EXPECT_EQ(f.metadata().at("step"), "1");
  EXPECT_EQ(f.name(), path);

  // Overwriting replaces the file whole.
  const std::vector<double> y = {4};
  write_safetensors(path, {{"y", DType::F64, {1}, as_bytes(y)}});
  EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  EXPECT_EQ(SafetensorsFile::open(path).tensors().front().name, "y");
}

TEST_F(SafetensorsWrite, FailedSerializeLeavesExistingFileUntouched) {
  const std::string path = dir_ / "w.safetensors";
  const std::vector<float> x = {1, 2, 3};
  write_safetensors(path, {{"x", DType::F32, {3}, as_bytes(x)}});
  const Bytes before = read(path);

  const std::vector<float> four = {1, 2, 3, 4};
  const auto expect_refused = [&](const std::vector<TensorToWrite>& tensors, std::string_view part,
                                  const std::map<std::string, std::string>& meta = {}) {
    try {
      write_safetensors(path, tensors, meta);
      ADD_FAILURE() << "no error for " << part;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
    EXPECT_EQ(read(path), before);
    EXPECT_EQ(listing(), std::vector<std::string>{"w.safetensors"});
  };
  expect_refused({{"x", DType::F32, {3}, as_bytes(four)}},
                 "16 bytes given but dtype F32 with shape [3] needs 12");
  expect_refused({{"x", DType::F32, {-1, 4}, as_bytes(four)}}, "dimension 0 is negative");
  expect_refused({{"x", DType::F32, {4}, as_bytes(four)}, {"x", DType::F32, {4}, as_bytes(four)}},
                 "given twice");
  expect_refused({{"", DType::F32, {4}, as_bytes(four)}}, "empty name");
  expect_refused({{"__metadata__", DType::F32, {4}, as_bytes(four)}}, "__metadata__");
  expect_refused({{"bad\xff", DType::F32, {4}, as_bytes(four)}}, "not valid UTF-8");
  expect_refused({{"q", DType::F4, {3}, {}}}, "whole number of bytes");
  expect_refused({{"x", DType::F32, {4}, as_bytes(four)}}, "not valid UTF-8", {{"k", "\xc0"}});
}

TEST_F(SafetensorsWrite, IoFailureThrowsAndLeavesNothing) {
  const std::string path = dir_ / "missing" / "w.safetensors";
  const std::vector<std::uint8_t> x = {1};
  EXPECT_THROW(write_safetensors(path, {{"x", DType::U8, {1}, x}}), Error);
  EXPECT_TRUE(listing().empty());
  EXPECT_THROW(SafetensorsFile::open(path), FormatError);
  EXPECT_THROW(SafetensorsFile::open(dir_.string()), FormatError);  // a directory
}

TEST_F(SafetensorsWrite, SerializeRejectsBadInputBeforeWriting) {
  const std::vector<std::uint8_t> three = {1, 2, 3};
  EXPECT_THROW(serialize_safetensors({{"x", DType::U8, {2}, three}}), FormatError);
  EXPECT_NO_THROW(serialize_safetensors({{"x", DType::U8, {3}, three}}));
}

}  // namespace
}  // namespace normlab
