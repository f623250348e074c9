// Running one point of a sweep (or one doctor --confirm arm) by the user's external command, as
// `sweep --command` does: `/bin/sh -c LINE` with its output in DIR/command.log. The CLI's runner
// spawns and reaps several at once with progress; Python's normlab.doctor(command=) runs them with
// run_external_point, each blocking its thread.
#pragma once
#include <sys/types.h>

#include <string>

namespace normlab {

// Starts `sh -c line`, stdout and stderr to dir/command.log (dir created); returns its pid.
// Throws Error when /bin/sh cannot be started.
pid_t spawn_command(const std::string& line, const std::string& dir);

// How the command's process ended (a waitpid status), for its run's message: "the command exited
// with status 3 (output: DIR/command.log)", "... was killed by signal 9 ...".
std::string exit_note(int wait_status, const std::string& dir);

// The command's exit code as the judgement takes it: the status it exited with, else -1.
int exit_code(int wait_status);

// Runs the command to its end and judges the run it wrote in dir (judge_external_point, lab/sweep.h):
// "done", "diverged", "interrupted" or "failed".
std::string run_external_point(const std::string& line, const std::string& dir);

}  // namespace normlab
