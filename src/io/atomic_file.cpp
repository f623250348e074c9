#include "io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "normlab/errors.h"

namespace normlab {

FileSyscalls posix_file_syscalls() {
  return {[](const char* p, int flags, mode_t mode) { return ::open(p, flags, mode); },
          [](int fd, const void* buf, std::size_t n) { return ::write(fd, buf, n); },
          [](int fd) { return ::fsync(fd); },
          [](int fd) { return ::close(fd); },
          [](const char* from, const char* to) { return ::rename(from, to); },
          [](const char* p) { return ::unlink(p); }};
}

FileSyscalls& file_syscalls() {
  static FileSyscalls calls = posix_file_syscalls();
  return calls;
}

namespace {

template <class... Args>
[[noreturn]] void fail_io(std::string_view who, std::string_view path,
                          fmt::format_string<Args...> f, Args&&... args) {
  const int err = errno;
  throw Error(fmt::format("{} {}: {}: {}", who, path, fmt::format(f, std::forward<Args>(args)...),
                          std::strerror(err)));
}

void write_all(const FileSyscalls& sys, int fd, std::span<const std::uint8_t> bytes,
               std::string_view who, const std::string& path, const std::string& tmp) {
  while (!bytes.empty()) {
    const std::size_t chunk = std::min<std::size_t>(bytes.size(), std::size_t{1} << 30);
    const ssize_t n = sys.write(fd, bytes.data(), chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_io(who, path, "cannot write '{}'", tmp);
    }
    bytes = bytes.subspan(static_cast<std::size_t>(n));
  }
}

}  // namespace

void write_file_atomic(const std::string& path,
                       std::span<const std::span<const std::uint8_t>> parts, std::string_view who) {
  const FileSyscalls& sys = file_syscalls();
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = sys.open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_io(who, path, "cannot create '{}'", tmp);
  try {
    for (const auto& part : parts) write_all(sys, fd, part, who, path, tmp);
    if (sys.fsync(fd) != 0) fail_io(who, path, "cannot fsync '{}'", tmp);
    const int rc = sys.close(fd);
    fd = -1;
    if (rc != 0) fail_io(who, path, "cannot close '{}'", tmp);
    if (sys.rename(tmp.c_str(), path.c_str()) != 0)
      fail_io(who, path, "cannot rename '{}' over it", tmp);
  } catch (...) {
    if (fd >= 0) sys.close(fd);
    sys.unlink(tmp.c_str());
    throw;
  }

  // Make the rename itself durable.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int dfd = sys.open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
  if (dfd < 0) fail_io(who, path, "written, but cannot open its directory '{}' to fsync it", dir);
  const int rc = sys.fsync(dfd);
  const int err = errno;
  sys.close(dfd);
  errno = err;
  if (rc != 0) fail_io(who, path, "written, but cannot fsync its directory '{}'", dir);
}

void write_file_atomic(const std::string& path, std::string_view text, std::string_view who) {
  const std::span<const std::uint8_t> part(reinterpret_cast<const std::uint8_t*>(text.data()),
                                           text.size());
  write_file_atomic(path, std::span<const std::span<const std::uint8_t>>(&part, 1), who);
}

}  // namespace normlab
