// One `doctor --confirm` of a run, as the CLI and the Python binding drive it: plan every problem
// (confirm_jobs), prepare the arms' run directories (prepare_confirm_jobs), let the caller train
// the arms through its sweep runner, then measure them (finish_confirmation). The plan is a
// function of the run and the options alone, so a rerun (or the second half of the Python call)
// finds the same arms and resumes them.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lab/confirm.h"
#include "lab/confirm_run.h"

namespace normlab {

struct ConfirmOptions {
  int seeds = 3;
  int jobs = 1;
  long max_steps = 0;   // 0: no cap on the window
  std::string command;  // an external trainer's command template (sweep --command's, plus {seed}
                        // and {resume_from}); empty: normlab trains the arms
};

struct ConfirmJob {
  ConfirmPlan plan;
  std::string out;  // RUN/confirm/fromS_toE (_command for an external trainer's arms)
  ArmPoints arms;   // what is trained (the arms that can be)
};

// The diagnosis (doctor's JSON) of run_dir and the run's config give one job per problem.
// Throws ConfigError for bad options or an arm whose config is invalid.
std::vector<ConfirmJob> confirm_jobs(const std::string& run_dir, const nlohmann::json& diagnosis,
                                     const Config& run_cfg, const ConfirmOptions& o);

// Creates the arms' run directories that a start at a checkpoint needs (prepare_arm_dir), with
// train.threads = cores / jobs for arms normlab trains.
void prepare_confirm_jobs(std::vector<ConfirmJob>& jobs, const std::string& run_dir,
                          const ConfirmOptions& o);

// Measures every job's arms and judges the remedies.
std::vector<Confirmation> finish_confirmation(const std::vector<ConfirmJob>& jobs,
                                              const std::string& run_dir,
                                              const nlohmann::json& diagnosis,
                                              const Config& run_cfg, const ConfirmOptions& o);

// The placeholders {NAME} of a command template.
std::vector<std::string> command_placeholders(const std::string& templ);

// The diagnosis JSON with each problem finding's "confirmation" (or "confirmation_plan" for a dry
// run) and a top-level "confirmation" array.
nlohmann::json attach_confirmations(nlohmann::json diagnosis, const std::vector<ConfirmJob>& jobs,
                                    const std::vector<Confirmation>* done);

}  // namespace normlab
