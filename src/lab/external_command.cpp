#include "lab/external_command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "lab/sweep.h"
#include "normlab/errors.h"

extern char** environ;

namespace fs = std::filesystem;

namespace normlab {

pid_t spawn_command(const std::string& line, const std::string& dir) {
  fs::create_directories(dir);
  const std::string log = (fs::path(dir) / "command.log").string();
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  std::string sh = "/bin/sh", c = "-c", cmd = line;
  char* argv[] = {sh.data(), c.data(), cmd.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    throw Error(fmt::format("cannot start /bin/sh for the command: {}", std::strerror(rc)));
  return pid;
}

std::string exit_note(int st, const std::string& dir) {
  const std::string log = (fs::path(dir) / "command.log").string();
  if (WIFEXITED(st))
    return fmt::format("the command exited with status {} (output: {})", WEXITSTATUS(st), log);
  if (WIFSIGNALED(st))
    return fmt::format("the command was killed by signal {} (output: {})", WTERMSIG(st), log);
  return "the command ended abnormally";
}

int exit_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : -1; }

std::string run_external_point(const std::string& line, const std::string& dir) {
  const pid_t pid = spawn_command(line, dir);
  int st = 0;
  while (::waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) throw Error(fmt::format("cannot wait for the command: {}", std::strerror(errno)));
  return judge_external_point(dir, exit_code(st), exit_note(st, dir));
}

}  // namespace normlab
