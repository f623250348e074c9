// `normlab doctor RUN --confirm` (cmd_doctor_confirm.cpp): the options doctor's command line adds
// for it, and the run of the confirmation with its rendering.
#pragma once
#include <string>

#include "lab/confirm.h"

namespace normlab::cli {

struct DoctorConfirmOptions {
  int seeds = 3;
  int jobs = 1;
  long max_steps = 0;
  bool dry_run = false;
  bool json = false;
  std::string command;
};

// Plans, runs and judges the confirmation of every problem of run_dir; prints text or JSON.
int run_doctor_confirm(const std::string& run_dir, const DoctorConfirmOptions& o);

// The text of one problem's confirmation (its arms in `out`).
void print_confirmation(const Confirmation& c, const std::string& out);

}  // namespace normlab::cli
