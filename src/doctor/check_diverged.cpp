// doctor's divergence check: the run diverged by the one rule of train, sweep and compare
// (train/divergence.h): its end event says so, or -- for a run trained without the rule (older
// versions, the library's Trainer without hooks) -- the rule finds it on the step lines and the
// end. The first remedy is the learning rate, with a value taken from evidence: the largest
// learning rate that did not diverge among the runs of the same variant of the run's sweep, or
// a tenfold cut when there is no such sweep.
#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "doctor/doctor_detail.h"
#include "normlab/config_file.h"
#include "normlab/metrics.h"
#include "train/divergence.h"

namespace fs = std::filesystem;

namespace normlab::doctor_detail {

namespace {

struct Verdict {
  std::string why;
  long step = 0;
  bool from_end_event = false;
};

// The rule's verdict on the run, or none.
std::optional<Verdict> divergence_of(const Run& r) {
  if (r.end_reason == "diverged") {
    return Verdict{divergence_reason(r.end_detail), r.end_step, true};
  }
  const long last = r.steps.empty() ? 0 : r.steps.back()->value(metric::step, 0L);
  DivergenceRule rule(r.knows("train.steps") ? r.cfg.train.steps : last);
  for (const json* j : r.steps) {
    const long s = j->value(metric::step, 0L);
    // A loss that is null or absent is missing evidence (a probed run), not a non-finite loss:
    // only `nonfinite: true` says the step went non-finite.
    if (!std::isfinite(num(*j, metric::loss)) && !j->value(metric::nonfinite, false)) continue;
    if (auto why = rule.observe(s, num(*j, metric::loss), j->value(metric::skipped, false)))
      return Verdict{*why + " (the rule on the logged steps)", s, false};
  }
  if (r.end_reason == "done")
    if (auto why = rule.judge_end(r.final_val_loss, r.final_loss))
      return Verdict{*why, r.end_step, false};
  return std::nullopt;
}

// A number as --set takes it: "0.001", "3e-05".
std::string lr_str(double v) { return fmt::format("{:g}", v); }

struct LrEvidence {
  double lr = 0;
  std::string run;  // the sweep run it comes from
};

// The largest learning rate below `lr` of a finished, not diverged run of the same variant in the
// sweep the run lies in: from the parent's sweep.json when the sweep has written it, else from
// the sibling run directories' sweep_status.json and config.toml (a sweep still running).
std::optional<LrEvidence> sweep_lr(const Run& r, double lr) {
  if (r.run_dir.empty()) return std::nullopt;
  fs::path dir = fs::path(r.run_dir).lexically_normal();
  if (dir.filename().empty()) dir = dir.parent_path();
  const std::string name = dir.filename().string();
  const fs::path sweep = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  std::optional<LrEvidence> best;
  auto consider = [&](double v, const std::string& run) {
    if (std::isfinite(v) && v > 0 && v < lr && (!best || v > best->lr)) best = LrEvidence{v, run};
  };
  std::error_code ec;
  if (std::ifstream in(sweep / "sweep.json"); in) {
    try {
      const json j = json::parse(in);
      const std::string key = j.value("lr_key", "optim.lr");
      const json* me = nullptr;
      for (const auto& run : j.at("runs"))
        if (run.value("dir", "") == name) me = &run;
      if (!me || !me->contains("overrides") || !(*me)["overrides"].contains(key)) return std::nullopt;
      json variant = (*me)["overrides"];
      variant.erase(key);
      for (const auto& run : j.at("runs")) {
        if (run.value("status", "") != "done" || !run.contains("overrides")) continue;
        json o = run["overrides"];
        if (!o.contains(key) || !o[key].is_string()) continue;
        const double v = std::strtod(o[key].get<std::string>().c_str(), nullptr);
        o.erase(key);
        if (o == variant) consider(v, run.value("name", run.value("dir", "")));
      }
    } catch (const std::exception&) {
      return std::nullopt;  // a damaged sweep.json is no evidence
    }
    return best;
  }
  // No sweep.json (yet): the sibling runs of a sweep say their status and config themselves.
  if (!r.has_config || !fs::exists(dir / "sweep_status.json", ec)) return std::nullopt;
  for (const auto& e : fs::directory_iterator(sweep, ec)) {
    if (!e.is_directory() || e.path().filename() == name) continue;
    try {
      std::ifstream st(e.path() / "sweep_status.json");
      if (!st || json::parse(st).value("status", "") != "done") continue;
      Config c = load_config((e.path() / "config.toml").string());
      const double v = c.optim.lr;
      c.optim.lr = r.cfg.optim.lr;
      if (c == r.cfg) consider(v, e.path().filename().string());
    } catch (const std::exception&) {
      // not a run of this sweep, or unreadable: no evidence
    }
  }
  return best;
}

}  // namespace

// ---- divergence ------------------------------------------------------------------------------
void check_diverged(const Run& r, std::vector<DoctorFinding>& out) {
  const std::optional<Verdict> v = divergence_of(r);
  if (!v) return;
  DoctorFinding f;
  f.kind = "diverged";
  f.severity = "problem";
  f.first_step = f.last_step = v->step;
  const std::string planned =
      r.knows("train.steps") ? fmt::format(" of {}", r.cfg.train.steps) : "";
  f.title = fmt::format("diverged at step {}{}: {}", v->step, planned, v->why);
  f.evidence.push_back(
      v->from_end_event
          ? fmt::format("its end event (metrics.jsonl): reason \"diverged\" at step {}", v->step)
          : fmt::format("by the divergence rule of train, sweep and compare (it trained without "
                        "it): {}", v->why));
  if (r.initial_loss)
    f.evidence.push_back(fmt::format(
        "initial loss (step 1) {}; final train loss {}; final val loss {}", g(*r.initial_loss),
        r.final_loss ? g(*r.final_loss) : "-", r.final_val_loss ? g(*r.final_val_loss) : "-"));
  // A probed run says where the numbers first went non-finite (on a probed step).
  for (const char* key : {metric::nonfinite_forward, metric::nonfinite_backward})
    for (const json* j : r.steps)
      if (j->contains(key) && (*j)[key].is_string()) {
        f.evidence.push_back(fmt::format(
            "first non-finite {} on probed step {}: {} ({})",
            std::string_view(key) == metric::nonfinite_forward
                ? "output (forward pass)"
                : "gradient (backward pass, from the output down)",
            j->value(metric::step, 0L), (*j)[key].get<std::string>(), key));
        break;
      }
  const double lr = r.cfg.optim.lr;
  std::string suggested;
  std::string source;
  if (!r.knows("optim.lr")) {
    f.remedies.push_back(advice(
        r, r.has_config ? "lower the learning rate tenfold (the run's own value is unknown: its "
                          "config.toml lists optim.lr in source.unknown)"
                        : "lower optim.lr tenfold (no config.toml: the run's learning rate is "
                          "unknown)"));
    source = "tenfold";
  } else if (const auto ev = sweep_lr(r, lr)) {
    suggested = lr_str(ev->lr);
    source = "sweep";
    f.remedies.push_back(config_remedy(
        r,
        fmt::format("lower optim.lr to {} (--set optim.lr={}): the largest learning rate that did "
                    "not diverge among this sweep's runs of the same variant ({}; this run: {})",
                    suggested, suggested, ev->run, lr_str(lr)),
        {{"optim.lr", suggested}}));
  } else {
    suggested = lr_str(lr / 10);
    source = "tenfold";
    f.remedies.push_back(config_remedy(
        r,
        fmt::format("lower optim.lr to {} (--set optim.lr={}): a tenfold cut from {}, for want of "
                    "evidence (no sweep of this run's variant trained a lower learning rate "
                    "without diverging)",
                    suggested, suggested, lr_str(lr)),
        {{"optim.lr", suggested}}));
  }
  if (r.knows("optim.warmup_steps") && r.cfg.optim.warmup_steps == 0) {
    const std::string w = std::to_string(std::max(10L, static_cast<long>(r.cfg.train.steps) / 20));
    f.remedies.push_back(
        config_remedy(r, "a warmup: --set optim.warmup_steps=" + w, {{"optim.warmup_steps", w}}));
  }
  if (r.knows("optim.grad_clip") && r.cfg.optim.grad_clip == 0)
    f.remedies.push_back(config_remedy(r, "gradient clipping: --set optim.grad_clip=1",
                                       {{"optim.grad_clip", "1"}}));
  f.remedies.push_back(advice(
      r, "the findings below, when there are any, name the instability behind it; their remedies "
         "let a higher learning rate train"));
  f.confirm.push_back(
      r.torch() ? std::string("rerun with the lower learning rate: the loss should end below "
                              "where it started")
      : suggested.empty()
          ? std::string("rerun with the lower learning rate: its end event's reason is \"done\"")
          : fmt::format("rerun with --set optim.lr={}: its end event's reason is \"done\" and "
                        "`normlab train` exits 0",
                        suggested));
  f.values = {{"step", v->step},
              {"reason", v->why},
              {"from_end_event", v->from_end_event},
              {"lr", r.knows("optim.lr") ? json(lr) : json(nullptr)},
              {"suggested_lr",
               suggested.empty() ? json(nullptr) : json(std::strtod(suggested.c_str(), nullptr))},
              {"lr_source", source}};
  // The loss at the end against the loss it started from: diverged means not below it.
  f.values["statistic"] = statistic("loss_end", r.final_loss ? *r.final_loss : NAN,
                                    r.initial_loss ? *r.initial_loss : NAN, v->step);
  if (!r.initial_loss) f.values["statistic"]["threshold"] = nullptr;
  out.push_back(std::move(f));
}

}  // namespace normlab::doctor_detail
