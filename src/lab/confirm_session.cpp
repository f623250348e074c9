// One `doctor --confirm` of a run: plan, prepare, measure (lab/confirm_session.h).
#include "lab/confirm_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "doctor/doctor.h"
#include "io/atomic_file.h"
#include "io/metrics.h"
#include "lab/confirm_doctor.h"
#include "tensor/threading.h"

namespace fs = std::filesystem;

namespace normlab {

std::vector<std::string> command_placeholders(const std::string& templ) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < templ.size(); ++i) {
    if (templ[i] != '{') continue;
    const std::size_t close = templ.find('}', i);
    if (close == std::string::npos) break;
    out.push_back(templ.substr(i + 1, close - i - 1));
    i = close;
  }
  return out;
}

std::vector<ConfirmJob> confirm_jobs(const std::string& run_dir, const nlohmann::json& diagnosis,
                                     const Config& run_cfg, const ConfirmOptions& o) {
  if (o.jobs < 1) throw ConfigError({fmt::format("-j {} must be >= 1", o.jobs)});
  if (o.max_steps < 0) throw ConfigError({fmt::format("--max-steps {} must be >= 0", o.max_steps)});
  const std::vector<std::string> ph = command_placeholders(o.command);
  const bool has = [&](const std::string& n) {
    return std::find(ph.begin(), ph.end(), n) != ph.end();
  }("resume_from");
  // Without {resume_from} an external command cannot start at a checkpoint.
  const auto checkpoints = o.command.empty() || has ? intact_checkpoints(run_dir)
                                                    : std::vector<std::pair<long, std::string>>{};
  const long reached = diagnosis.value("steps", 0L);
  std::vector<ConfirmJob> jobs;
  std::vector<nlohmann::json> records;
  for (ConfirmProblem p : confirm_problems(diagnosis, run_cfg)) {
    ConfirmJob j;
    // The onset as confirm measures the statistic: the first step where the run's own value
    // reached the threshold, when that is later than where doctor's evidence began (a finding
    // can begin with another sign, such as the attention entropy), so that the window covers it.
    std::string onset_note;
    const auto th = confirm_default_threshold(p.statistic);
    if (th && (p.statistic == "attn_max_logit" || p.statistic == "resid_rms" ||
               p.statistic == "dyt_saturated" || p.statistic == "log_z_drift" ||
               p.statistic == "max_logit_raw")) {
      if (records.empty()) records = read_metrics(run_dir);
      for (const auto& [s, v] : statistic_series(p.statistic, records, 0, run_cfg.train.steps))
        if (v >= *th) {
          if (s > p.onset_step)
            onset_note = fmt::format(
                "onset: step {}, where the run's {} first reached {} "
                "(doctor's evidence begins at step {})",
                s, p.statistic, *th, p.onset_step),
            p.onset_step = s;
          break;
        }
    }
    CannotRun cannot;
    if (!o.command.empty())
      cannot = [&ph](const std::vector<std::pair<std::string, std::string>>& set) {
        for (const auto& [k, v] : set)
          if (std::find(ph.begin(), ph.end(), k) == ph.end())
            return fmt::format("cannot confirm: your command has no placeholder for {}", k);
        return std::string();
      };
    // An external command resumes with its own code: any change but the model's (another
    // model cannot take the checkpoint's weights) can start at its checkpoint.
    FixedOnResume fixed;
    if (!o.command.empty())
      fixed = [](const std::string& k) { return k.rfind("model.", 0) == 0; };
    j.plan = plan_confirmation(p, run_cfg, checkpoints, reached, o.seeds, o.max_steps, cannot,
                               fixed);
    if (!onset_note.empty()) j.plan.notes.insert(j.plan.notes.begin(), onset_note);
    j.plan.external = !o.command.empty();
    if (!o.command.empty()) {
      if (!has)
        j.plan.notes.push_back(
            "your command has no {resume_from} placeholder: every arm starts "
            "at step 0");
    }
    // One folder per replay (start, window): the problems that share it share the control and
    // the arms of the same change; a rerun with another window (--max-steps) or --command never
    // mistakes another's arms for its own; seed k of an arm is the same run for any --seeds.
    j.out = confirm_dir(run_dir, fmt::format("from{}_to{}{}", j.plan.start_step, j.plan.window_end,
                                             o.command.empty() ? "" : "_command"));
    j.arms = arm_points(j.plan, run_cfg);
    const int threads = o.jobs > 1 ? std::max(1, available_cores() / o.jobs) : 0;
    for (std::size_t i = 0; i < j.arms.points.size(); ++i) {
      Config& c = j.arms.configs[i];
      if (threads > 0) c.train.threads = threads;
      if (o.command.empty()) continue;
      // An external command's placeholders: every config key it names, from the arm's config,
      // and {resume_from}: the start checkpoint (empty for step 0).
      SweepPoint& pt = j.arms.points[i];
      pt.overrides.clear();
      for (const auto& n : ph) {
        if (n == "out" || n == "seed") continue;
        if (n == "resume_from") {
          pt.overrides.emplace_back(n, j.plan.start_checkpoint);
          continue;
        }
        const std::string v = config_value_text(c, n);
        if (v.empty() && n.find('.') == std::string::npos)
          throw ConfigError(
              {fmt::format("--command: {{{}}} is neither a config key nor {{out}}, "
                           "{{seed}} or {{resume_from}}",
                           n)});
        pt.overrides.emplace_back(n, v);
      }
    }
    jobs.push_back(std::move(j));
  }
  return jobs;
}

void prepare_confirm_jobs(std::vector<ConfirmJob>& jobs, const std::string& run_dir,
                          const ConfirmOptions& o) {
  if (!o.command.empty()) return;  // the command writes its own run directories
  for (auto& j : jobs) {
    fs::create_directories(j.out);
    for (std::size_t i = 0; i < j.arms.points.size(); ++i)
      prepare_arm_dir(j.plan, run_dir, (fs::path(j.out) / j.arms.points[i].name).string(),
                      j.arms.configs[i]);
  }
}

std::vector<Confirmation> finish_confirmation(const std::vector<ConfirmJob>& jobs,
                                              const std::string& run_dir,
                                              const nlohmann::json& diagnosis,
                                              const Config& run_cfg, const ConfirmOptions& o) {
  std::vector<Confirmation> out;
  for (const auto& j : jobs) {
    double h = NAN;
    if (j.plan.problem.statistic == "unigram_gap") {
      h = diagnosis.value("unigram_entropy", nlohmann::json(nullptr)).is_number()
              ? diagnosis["unigram_entropy"].get<double>()
              : training_unigram_entropy(run_cfg, run_dir);
    }
    Confirmation c = measure_confirmation(j.plan, run_dir, j.out, h);
    if (!o.command.empty() && j.plan.start_step == 0 && j.plan.problem.onset_step > 0) {
      const auto ph = command_placeholders(o.command);
      if (std::find(ph.begin(), ph.end(), "resume_from") == ph.end())
        c.command_note =
            "the arms started at step 0: your command has no {resume_from} "
            "placeholder, so each arm retrained the run from its beginning";
    }
    if (!c.command_note.empty())
      for (auto& v : c.verdicts)
        if (v.verdict != "cannot confirm") v.reason += " (" + c.command_note + ")";
    out.push_back(std::move(c));
  }
  // RUN/confirm/confirmation.json: what `normlab report RUN` draws (the latest confirmation).
  nlohmann::json all = nlohmann::json::array();
  for (std::size_t i = 0; i < out.size(); ++i) {
    all.push_back(to_json(out[i]));
    all.back()["dir"] = jobs[i].out;
  }
  if (!out.empty()) {
    fs::create_directories(fs::path(run_dir) / "confirm");
    write_file_atomic((fs::path(run_dir) / "confirm" / "confirmation.json").string(),
                      nlohmann::json{{"confirmation", all}}.dump(1) + "\n", "[confirm]");
  }
  return out;
}

nlohmann::json attach_confirmations(nlohmann::json diagnosis, const std::vector<ConfirmJob>& jobs,
                                    const std::vector<Confirmation>* done) {
  nlohmann::json all = nlohmann::json::array();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    nlohmann::json c = done ? to_json((*done)[i]) : to_json(jobs[i].plan);
    c["dir"] = jobs[i].out;
    if (!done) c["dry_run"] = true;
    all.push_back(c);
    for (auto& f : diagnosis["findings"])
      if (f.value("kind", "") == jobs[i].plan.problem.kind && f.value("severity", "") == "problem")
        f["confirmation"] = c;
  }
  diagnosis["confirmation"] = all;
  return diagnosis;
}

}  // namespace normlab
