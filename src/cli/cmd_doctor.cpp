// `normlab doctor RUN_DIR`: what went wrong in a run and what to change. The analysis is
// doctor/doctor.h; this file prints it as text or, with --json, as one JSON object.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "cli/commands.h"
#include "doctor/doctor.h"
#include "train/divergence.h"

namespace normlab::cli {

namespace {
// "ended diverged: REASON", without repeating the reason's own "diverged: " prefix.
std::string ended_text(const std::string& reason, const std::string& detail) {
  if (detail.empty()) return "ended " + reason;
  return "ended " + reason + ": " + divergence_reason(detail);
}
}  // namespace

namespace {

void print_list(const char* head, const std::vector<std::string>& items) {
  if (items.empty()) return;
  fmt::print("  {}:\n", head);
  for (const auto& s : items) fmt::print("    - {}\n", s);
}

std::string placement_name(Placement p) {
  switch (p) {
    case Placement::post:
      return "Post-Norm";
    case Placement::pre:
      return "Pre-Norm";
    case Placement::peri:
      return "Peri-Norm";
    default:
      return fmt::format("placement {}", to_string(p));
  }
}

void print_text(const Diagnosis& d) {
  const Config& c = d.config;
  fmt::print("normlab doctor: {}\n", d.run_dir);
  if (d.has_config && c.source.kind == SourceKind::torch)
    fmt::print("source: a PyTorch run ({}{}{})\n",
               c.source.trainer.empty() ? "normlab.torch" : c.source.trainer,
               c.source.world_size > 1 ? fmt::format(", {} processes, {}", c.source.world_size,
                                                     c.source.sharding)
                                       : "",
               c.source.unknown.empty()
                   ? ""
                   : fmt::format("; unknown, so not relied on: {}",
                                 fmt::join(c.source.unknown, ", ")));
  // A value the run's writer could not infer (source.unknown) is shown as unknown.
  const auto shown = [&c](const char* key, const auto& v) {
    return c.source.knows(key) ? fmt::format("{}", v) : std::string("unknown");
  };
  if (d.has_config)
    fmt::print(
        "run: {}, {} layers, d_model {}, qk_norm {}, lr {}, warmup {}, weight decay {}, "
        "z-loss {}; {} of {} steps, {}\n",
        shown("model.placement", placement_name(c.model.placement)), c.model.n_layer,
        c.model.d_model, shown("model.qk_norm", to_string(c.model.qk_norm)),
        shown("optim.lr", c.optim.lr), shown("optim.warmup_steps", c.optim.warmup_steps),
        shown("optim.weight_decay", c.optim.weight_decay), shown("train.z_loss", c.train.z_loss),
        d.steps, c.train.steps,
        d.end_reason.empty() ? std::string("no end event (still running, or killed)")
                             : ended_text(d.end_reason, d.end_detail));
  else
    fmt::print("run: no config.toml; {} steps\n", d.steps);
  fmt::print("diagnostics: {}\n", d.diag_records ? fmt::format("{} records{}", d.diag_records,
                                                               d.per_head ? ", per head" : "")
                                                 : std::string("off"));
  if (d.unigram_entropy)
    fmt::print("unigram entropy of the training tokens: {:.4f} nats; final train loss {}\n",
               *d.unigram_entropy,
               d.final_loss ? fmt::format("{:.4f}", *d.final_loss) : std::string("-"));
  for (const auto& f : d.findings) {
    fmt::print("\n{} {}\n", f.severity == "problem" ? "PROBLEM" : "note", f.title);
    if (f.first_step == f.last_step && f.first_step)
      fmt::print("  step {}\n", f.first_step);
    else if (f.first_step)
      fmt::print("  steps {}-{}\n", f.first_step, f.last_step);
    print_list("evidence", f.evidence);
    std::vector<std::string> remedies;
    for (const Remedy& m : f.remedies)
      remedies.push_back(m.tried ? "already tried: " + m.text : m.text);
    print_list(f.severity == "problem" ? "remedy" : "what to do", remedies);
    print_list("to confirm", f.confirm);
  }
  if (!d.not_checked.empty() || !d.unchecked.empty()) {
    fmt::print("\nnot checked:\n");
    for (const auto& n : d.not_checked)
      fmt::print("  - {} (needs {}): {}\n", n.check, fmt::join(n.needs, ", "), n.reason);
    for (const auto& u : d.unchecked) fmt::print("  - {}\n", u);
    if (!d.enable.empty()) fmt::print("  enable with {}\n", d.enable);
  }
  fmt::print("\nverdict: {}\n", d.verdict());
}

}  // namespace

void add_doctor(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand(
      "doctor", "Diagnose a run: instabilities with their evidence, remedy and how to confirm");
  cmd->footer(
      "Reads RUN_DIR/metrics.jsonl and config.toml. Exit status 0 whatever it finds; "
      "docs/doctor.md lists the checks and their thresholds.");
  struct Opts {
    std::string run_dir;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("run_dir", o->run_dir, "Run directory (as written by train, sweep or compare)")
      ->required();
  cmd->add_flag("--json", o->json, "Print the diagnosis as one JSON object");
  cmd->callback([&action, o] {
    action = [o] {
      const Diagnosis d = diagnose_run(o->run_dir);
      if (o->json)
        fmt::print("{}\n", to_json(d).dump(2));
      else
        print_text(d);
      return kExitOk;
    };
  });
}

}  // namespace normlab::cli
