// The atomic writer (io/atomic_file.h) behind safetensors files and checkpoints, tested as atomic:
//  - the system calls it makes, recorded through its seam: the final path is never opened for
//    writing, the temporary file is fsynced before it is renamed over the final path, and the
//    directory is fsynced after the rename (for write_safetensors and for every file a checkpoint
//    writes);
//  - without the seam, the final path made a FIFO: a writer that opened it for writing would block
//    (nobody reads it), so a child process that does not finish in time fails the test;
//  - real fault injection: a child process is stopped inside the write (after the header, after
//    some of the data, at the fsync, at the rename) and SIGKILLed there, or SIGKILLed at random
//    moments of a large write; the parent then reads the file and finds the previous content
//    intact (or, once the rename has happened, the complete new one).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "io/atomic_file.h"
#include "model/transformer.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/optimizers/adamw.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `count` tensors of `floats` float32 each, every element derived from `seed`.
struct Payload {
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors() const {
    std::vector<TensorToWrite> t;
    for (std::size_t i = 0; i < data.size(); ++i)
      t.push_back({fmt::format("t{}", i), DType::F32, {static_cast<std::int64_t>(data[i].size())},
                   {reinterpret_cast<const std::uint8_t*>(data[i].data()), data[i].size() * 4}});
    return t;
  }
  Bytes bytes() const { return serialize_safetensors(tensors(), {{"seed", "x"}}); }
  void write(const std::string& path) const { write_safetensors(path, tensors(), {{"seed", "x"}}); }
};

Payload payload(int count, long floats, float seed) {
  Payload p;
  for (int i = 0; i < count; ++i) {
    p.data.emplace_back(floats);
    for (long j = 0; j < floats; ++j)
      p.data.back()[j] = seed + static_cast<float>(i * 7 + j % 1000);
  }
  return p;
}

class AtomicWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("normlab_atomic_" + std::string(::testing::UnitTest::GetInstance()
                                                 ->current_test_info()
                                                 ->name()) +
            "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    file_syscalls() = posix_file_syscalls();
    fs::remove_all(dir_);
  }
  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// The system calls, recorded through the seam.

struct Call {
  std::string op;    // open, write, fsync, close, rename
  std::string path;  // the file the call concerns (for fd calls, the path it was opened as)
  int flags = 0;     // open only
  std::string to;    // rename only
};
std::vector<Call> g_calls;
std::vector<std::string> g_fd_path(4096);

void record_calls() {
  g_calls.clear();
  FileSyscalls& s = file_syscalls();
  s.open = [](const char* p, int flags, mode_t mode) {
    const int fd = posix_file_syscalls().open(p, flags, mode);
    if (fd >= 0 && fd < 4096) g_fd_path[fd] = p;
    g_calls.push_back({"open", p, flags, ""});
    return fd;
  };
  s.write = [](int fd, const void* b, std::size_t n) {
    g_calls.push_back({"write", g_fd_path.at(fd), 0, ""});
    return posix_file_syscalls().write(fd, b, n);
  };
  s.fsync = [](int fd) {
    g_calls.push_back({"fsync", g_fd_path.at(fd), 0, ""});
    return posix_file_syscalls().fsync(fd);
  };
  s.close = [](int fd) {
    g_calls.push_back({"close", g_fd_path.at(fd), 0, ""});
    return posix_file_syscalls().close(fd);
  };
  s.rename = [](const char* from, const char* to) {
    g_calls.push_back({"rename", from, 0, to});
    return posix_file_syscalls().rename(from, to);
  };
}

bool opens_for_writing(const Call& c) {
  return c.op == "open" && (c.flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)) != 0;
}

// Checks, in the recorded calls, the life of every file renamed into place: it was opened for
// writing under another name, written, fsynced after its last write and before its close, renamed
// over its final name, and the final name's directory was then opened and fsynced. No final name
// was ever opened for writing. Returns the final names.
std::vector<std::string> check_atomic_replacements(const std::vector<Call>& calls) {
  std::vector<std::string> finals;
  for (std::size_t r = 0; r < calls.size(); ++r) {
    if (calls[r].op != "rename") continue;
    const std::string tmp = calls[r].path, final_path = calls[r].to;
    finals.push_back(final_path);
    EXPECT_NE(tmp, final_path);
    EXPECT_EQ(fs::path(tmp).parent_path(), fs::path(final_path).parent_path())
        << "the temporary file must sit in the final file's directory (rename is atomic only "
           "within one file system)";
    long opened = -1, last_write = -1, fsynced = -1, closed = -1;
    for (std::size_t i = 0; i < r; ++i) {
      if (calls[i].path != tmp) continue;
      if (opens_for_writing(calls[i])) opened = static_cast<long>(i);
      if (calls[i].op == "write") last_write = static_cast<long>(i);
      if (calls[i].op == "fsync") fsynced = static_cast<long>(i);
      if (calls[i].op == "close") closed = static_cast<long>(i);
    }
    EXPECT_GE(opened, 0) << tmp << " was never opened for writing";
    EXPECT_GT(last_write, opened) << tmp << " was never written";
    EXPECT_GT(fsynced, last_write) << tmp << " was not fsynced after its last write";
    EXPECT_GT(closed, fsynced) << tmp << " was closed before it was fsynced";
    const std::string dir = fs::path(final_path).parent_path().string();
    bool dir_synced = false;
    for (std::size_t i = r + 1; i < calls.size() && !dir_synced; ++i)
      dir_synced = calls[i].op == "fsync" && calls[i].path == dir;
    EXPECT_TRUE(dir_synced) << "directory " << dir << " not fsynced after the rename of "
                            << final_path;
  }
  for (const Call& c : calls)
    for (const std::string& f : finals)
      EXPECT_FALSE(opens_for_writing(c) && c.path == f) << "the final path " << f
                                                        << " was opened for writing";
  return finals;
}

TEST_F(AtomicWrite, SafetensorsWriterReplacesThroughFsyncedTemporary) {
  const std::string path = dir_ / "w.safetensors";
  payload(3, 1000, 1).write(path);  // a previous file to replace
  record_calls();
  const Payload next = payload(3, 1000, 2);
  next.write(path);
  file_syscalls() = posix_file_syscalls();
  EXPECT_EQ(check_atomic_replacements(g_calls), std::vector<std::string>{path});
  long writes = 0;
  for (const Call& c : g_calls) writes += c.op == "write";
  EXPECT_GE(writes, 4);  // header, then each tensor
  EXPECT_EQ(read_file(path), next.bytes());
}

TEST_F(AtomicWrite, CheckpointFilesAreReplacedThroughFsyncedTemporaries) {
  Config cfg;
  cfg.model.n_layer = 1;
  cfg.model.d_model = 16;
  cfg.model.n_head = 2;
  cfg.model.d_ff = 32;
  cfg.model.seq_len = 8;
  Transformer<float> model(cfg.model, 1, 8);
  model.init_params(1);
  AdamW<float> opt(model.table(), cfg.optim);
  TrainingState st;
  st.step = 1;
  save_checkpoint(dir_.string(), cfg, model, opt, st, 2);
  record_calls();
  st.step = 2;
  save_checkpoint(dir_.string(), cfg, model, opt, st, 2);
  file_syscalls() = posix_file_syscalls();
  const std::vector<std::string> finals = check_atomic_replacements(g_calls);
  std::vector<std::string> names;
  for (const auto& f : finals) names.push_back(fs::path(f).filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "model.safetensors", "state.safetensors"}));
  EXPECT_EQ(latest_checkpoint(dir_.string()), (dir_ / "checkpoints" / "step_00000002").string());
}

TEST_F(AtomicWrite, FailedFsyncLeavesPreviousFileAndNoTemporary) {
  const std::string path = dir_ / "w.safetensors";
  const Payload old = payload(2, 100, 1);
  old.write(path);
  file_syscalls().fsync = [](int) {
    errno = EIO;
    return -1;
  };
  try {
    payload(2, 100, 2).write(path);
    ADD_FAILURE() << "a failed fsync was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot fsync"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  file_syscalls() = posix_file_syscalls();
  EXPECT_EQ(read_file(path), old.bytes());
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"w.safetensors"});
}

// ---------------------------------------------------------------------------------------------
// Child processes

// Forks a child that runs `in_child` (if any), writes `p` to `path` and exits 0, or 3 when the
// write throws. Returns the child's pid (-1 when fork failed).
template <class Setup>
pid_t fork_writer(const Payload& p, const std::string& path, Setup in_child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    in_child();
    try {
      p.write(path);
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  return pid;
}
pid_t fork_writer(const Payload& p, const std::string& path) {
  return fork_writer(p, path, [] {});
}

// Waits up to timeout_s for the child; returns its wait status, or kills it and returns -1.
int wait_or_kill(pid_t pid, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    ::usleep(2000);
  }
}

TEST_F(AtomicWrite, FinalPathIsNeverOpenedForWriting) {
  // The final path is a FIFO that nobody reads: opening it for writing blocks. A correct writer
  // never opens it and replaces it by rename.
  const std::string path = dir_ / "w.safetensors";
  ASSERT_EQ(::mkfifo(path.c_str(), 0644), 0) << std::strerror(errno);
  const Payload next = payload(2, 100, 3);
  const pid_t pid = fork_writer(next, path);
  ASSERT_GE(pid, 0);
  const int status = wait_or_kill(pid, 30);
  ASSERT_NE(status, -1) << "the writer blocked: it opened the final path (a FIFO) for writing";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer failed, status " << status;
  struct stat sb {};
  ASSERT_EQ(::lstat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISREG(sb.st_mode)) << "the FIFO was not replaced by a regular file";
  EXPECT_EQ(read_file(path), next.bytes());
}

// The child's seam: after `g_stop_at` calls of kind g_stop_op, it tells the parent through a pipe
// and waits to be killed (for a rename, before making it).
std::string g_stop_op;
int g_stop_at = 0, g_seen = 0, g_notify_fd = -1;

[[noreturn]] void stop_here() {
  const char c = 's';
  if (::write(g_notify_fd, &c, 1) != 1) ::_exit(4);
  for (;;) ::pause();
}

void install_stop(const std::string& op, int at, int notify_fd) {
  g_stop_op = op;
  g_stop_at = at;
  g_seen = 0;
  g_notify_fd = notify_fd;
  FileSyscalls& s = file_syscalls();
  s.write = [](int fd, const void* b, std::size_t n) {
    const ssize_t r = posix_file_syscalls().write(fd, b, n);
    if (g_stop_op == "write" && ++g_seen == g_stop_at) stop_here();
    return r;
  };
  s.fsync = [](int fd) {
    if (g_stop_op == "fsync" && ++g_seen == g_stop_at) stop_here();
    return posix_file_syscalls().fsync(fd);
  };
  s.rename = [](const char* from, const char* to) {
    if (g_stop_op == "rename_before" && ++g_seen == g_stop_at) stop_here();
    const int r = posix_file_syscalls().rename(from, to);
    if (g_stop_op == "rename_after" && ++g_seen == g_stop_at) stop_here();
    return r;
  };
}

TEST_F(AtomicWrite, ChildKilledInsideTheWriteLeavesPreviousFile) {
  const std::string path = dir_ / "w.safetensors";
  const Payload old = payload(4, 1 << 16, 1), next = payload(4, 1 << 16, 2);
  struct Stop {
    const char* op;
    int at;
    bool renamed;  // the new file is in place by then
  };
  // 5 writes (header, 4 tensors), 2 fsyncs (file, directory), 1 rename.
  for (const Stop stop : {Stop{"write", 1, false}, Stop{"write", 3, false}, Stop{"write", 5, false},
                          Stop{"fsync", 1, false}, Stop{"rename_before", 1, false},
                          Stop{"rename_after", 1, true}}) {
    old.write(path);
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    // A child that finishes without reaching the stop exits 0: the parent sees EOF.
    const pid_t pid = fork_writer(next, path, [&] {
      ::close(fds[0]);
      install_stop(stop.op, stop.at, fds[1]);
    });
    ASSERT_GE(pid, 0);
    ::close(fds[1]);
    pollfd pf{fds[0], POLLIN, 0};
    const int ready = ::poll(&pf, 1, 30000);
    char c = 0;
    const bool stopped = ready == 1 && ::read(fds[0], &c, 1) == 1;
    ::close(fds[0]);
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(stopped) << stop.op << " " << stop.at << ": the child never reached the stop";
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    const Bytes now = read_file(path);
    const char* found = now == old.bytes()    ? "the previous file"
                        : now == next.bytes() ? "the new file"
                                              : "neither the previous file nor the new one";
    EXPECT_TRUE(now == (stop.renamed ? next.bytes() : old.bytes()))
        << "killed at " << stop.op << " " << stop.at << ": " << path << " should hold "
        << (stop.renamed ? "the new file" : "the previous file") << " but holds " << found << " ("
        << now.size() << " bytes)";
    // And it reads as the file it should be.
    std::vector<float> back(1 << 16);
    SafetensorsFile::open(path).read_f32("t3", back, {{1 << 16}});
    EXPECT_EQ(back, (stop.renamed ? next : old).data[3]);
  }
}

// Floats per tensor of the file the random-kill test writes: 16 MB in all, 4 MB under
// AddressSanitizer, where the -O0 writer spends about 40 times as long per byte (82 s for this test
// alone in the sanitizer stage). The kill moments scale with the measured write time either way.
#ifdef __SANITIZE_ADDRESS__
constexpr long kKilledWriteFloats = 1 << 18;
#else
constexpr long kKilledWriteFloats = 1 << 20;
#endif

TEST_F(AtomicWrite, ChildKilledAtRandomMomentsLeavesOldOrNewFile) {
  // No seam: a child writing a 16 MB file (4 MB under ASan) over the previous one is SIGKILLed at
  // random moments spread over the time one write takes. The file is always the previous one or
  // the new one.
  const std::string path = dir_ / "big.safetensors";
  const Payload old = payload(4, kKilledWriteFloats, 1), next = payload(4, kKilledWriteFloats, 2);
  const Bytes old_bytes = old.bytes(), next_bytes = next.bytes();
  const auto t0 = std::chrono::steady_clock::now();
  old.write(path);
  const double write_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(7);
  int saw_old = 0;
  for (int trial = 0; trial < 8; ++trial) {
    if (trial > 0) old.write(path);
    const pid_t pid = fork_writer(next, path);
    ASSERT_GE(pid, 0);
    const double delay = std::uniform_real_distribution<double>(0.0, 1.2)(rng) * write_s;
    ::usleep(static_cast<useconds_t>(delay * 1e6));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const Bytes now = read_file(path);
    saw_old += now == old_bytes;
    ASSERT_TRUE(now == old_bytes || now == next_bytes)
        << "trial " << trial << ": killed after " << delay * 1e3 << " ms (one write takes "
        << write_s * 1e3 << " ms), the file holds " << now.size() << " bytes";
  }
  std::printf("[atomic] %d of 8 children were killed before their rename\n", saw_old);
}

}  // namespace
}  // namespace normlab
