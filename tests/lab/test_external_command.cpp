// Running a point by an external command (src/lab/external_command.h), as sweep --command and
// Python's normlab.doctor(command=) both do: the output in DIR/command.log, the exit status or the
// signal in the run's message, and the run the command wrote judged.
#include "lab/external_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "fixtures.h"
#include "lab/sweep.h"

namespace normlab {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ExternalCommand, OutputGoesToTheLogAndTheStatusToTheMessage) {
  const std::string dir = test::temp_dir("external_command");
  EXPECT_EQ(run_external_point("echo out; echo err >&2; exit 3", dir + "/a"), "failed");
  EXPECT_EQ(read(dir + "/a/command.log"), "out\nerr\n");
  EXPECT_EQ(read_sweep_run(dir + "/a", {}).message,
            "the command exited with status 3 (output: " + dir + "/a/command.log)");
  // A command that exits 0 but writes no run has nothing to judge.
  EXPECT_EQ(run_external_point("true", dir + "/b"), "failed");
  EXPECT_NE(read_sweep_run(dir + "/b", {}).message.find("metrics"), std::string::npos)
      << read_sweep_run(dir + "/b", {}).message;
  // Killed by a signal: the signal's number, and an exit code of -1 for the judgement.
  EXPECT_EQ(run_external_point("kill -9 $$", dir + "/c"), "failed");
  EXPECT_EQ(read_sweep_run(dir + "/c", {}).message,
            "the command was killed by signal 9 (output: " + dir + "/c/command.log)");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace normlab
