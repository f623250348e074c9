// Atomic file replacement: the one routine behind every file normlab must never leave
// half-written (safetensors files, hence checkpoints and exported weights; the checkpoint's
// `latest` pointer). The bytes go to "<path>.tmp.<pid>" in the same directory, never to `path`
// itself; that file is fsynced, closed and renamed over `path`, and the directory is fsynced so
// that the rename is durable. A crash at any moment leaves `path` holding its previous content or
// the complete new one (and at worst a stray temporary file next to it).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace normlab {

// Writes the concatenation of `parts` to `path` atomically. On an I/O failure throws Error whose
// message starts with `who` (e.g. "[safetensors]") and names `path`, removes the temporary file
// and leaves `path` as it was.
void write_file_atomic(const std::string& path,
                       std::span<const std::span<const std::uint8_t>> parts, std::string_view who);
void write_file_atomic(const std::string& path, std::string_view text, std::string_view who);

// Test seam: the system calls write_file_atomic makes, as a table that a test may replace to
// record them or to inject faults (tests/io/test_atomic_file.cpp). The defaults are the POSIX
// functions; nothing else in normlab changes them.
struct FileSyscalls {
  int (*open)(const char* path, int flags, mode_t mode);
  ssize_t (*write)(int fd, const void* buf, std::size_t n);
  int (*fsync)(int fd);
  int (*close)(int fd);
  int (*rename)(const char* from, const char* to);
  int (*unlink)(const char* path);
};
FileSyscalls& file_syscalls();
FileSyscalls posix_file_syscalls();

}  // namespace normlab
