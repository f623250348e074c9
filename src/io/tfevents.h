// TensorBoard event files: scalars as TensorBoard's readers expect them, written without
// TensorBoard or protobuf. A file is a sequence of TFRecords (uint64 length, masked CRC-32C of
// the length, the bytes, masked CRC-32C of the bytes; little-endian), each holding one
// tensorflow.Event protocol buffer: first {wall_time, file_version: "brain.Event:2"}, then per
// step {wall_time, step, summary {value {tag, simple_value}}...}. The encoding is the few fields
// of event.proto / summary.proto that scalars use:
//   Event:   1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary (message)
//   Summary: 1 value (repeated message);  Value: 1 tag (string), 2 simple_value (float)
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace normlab {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `data`, and TFRecord's masked form
// ((crc >> 15 | crc << 17) + 0xa282ead8).
std::uint32_t crc32c(std::string_view data);
std::uint32_t masked_crc32c(std::string_view data);

class TfEventsWriter {
 public:
  // Creates `path` (its directory must exist) and writes the file-version event. Throws
  // FormatError naming the path when it cannot be written.
  TfEventsWriter(const std::string& path, double wall_time);
  // One event at `step` with a scalar per (tag, value).
  void scalars(long step, double wall_time,
               const std::vector<std::pair<std::string, float>>& values);
  void close();

 private:
  void record(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

}  // namespace normlab
