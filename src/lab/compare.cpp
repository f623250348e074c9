#include "lab/compare.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/metrics.h"
#include "lab/divergence.h"
#include "normlab/metrics.h"

namespace fs = std::filesystem;

namespace normlab {

std::string CompareRow::status() const {
  return result.stop_reason == "interrupted" ? "interrupted" : result.diverged ? "diverged" : "done";
}

std::vector<CompareRow> run_comparison(const Config& base, const std::vector<Placement>& placements,
                                       const std::string& out_dir, const TrainHooks& hooks,
                                       const std::function<void(Placement)>& on_start) {
  std::vector<CompareRow> rows;
  for (Placement p : placements) {
    Config cfg = base;
    cfg.model.placement = p;
    validate(cfg);
    const std::string dir = (fs::path(out_dir) / std::string(to_string(p))).string();
    if (on_start) on_start(p);
    const bool resume = fs::exists(fs::path(dir) / "checkpoints" / "latest");
    Trainer trainer(cfg, dir, resume);
    DivergenceRule rule(trainer.config().train.steps);
    if (resume)
      for (const auto& r : read_metrics(dir))
        if (!r.contains(metric::event) && r.value(metric::step, 0L) == 1)
          rule.set_initial_loss(step_record_from_json(r).loss);
    TrainHooks h = hooks;
    h.check_divergence = [&](const StepRecord& r) { return rule.observe(r); };
    h.judge_end = [&](const TrainResult& r) {
      return rule.judge_end(r.val_loss, r.train_loss_steps > 0 ? std::optional<double>(r.train_loss)
                                                               : std::nullopt);
    };
    CompareRow row;
    row.placement = p;
    row.run_dir = dir;
    row.result = trainer.run(h);
    if (row.result.stop_reason == "interrupted") {
      rows.push_back(row);
      return rows;
    }
    row.val_loss = row.result.val_loss ? *row.result.val_loss : trainer.evaluate();
    row.bits_per_byte = *row.val_loss / std::log(2.0) / trainer.val_bytes_per_token();
    rows.push_back(row);
  }
  auto num = [](std::optional<double> v) {
    return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
  };
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows)
    j.push_back({{"placement", to_string(r.placement)},
                 {"run_dir", r.run_dir},
                 {"status", r.status()},
                 {"steps", r.result.steps},
                 {"stop_reason", r.result.stop_reason},
                 {"train_loss", num(r.result.train_loss)},
                 {"train_loss_steps", r.result.train_loss_steps},
                 {"val_loss", num(r.val_loss)},
                 {"bits_per_byte", num(r.bits_per_byte)},
                 {"diverged", r.result.diverged},
                 {"tokens_per_s", r.result.tokens_per_s},
                 {"wall_s", r.result.wall_s}});
  fs::create_directories(out_dir);
  std::ofstream(fs::path(out_dir) / "summary.json") << j.dump(2) << '\n';
  std::ofstream(fs::path(out_dir) / "summary.md") << comparison_table(rows);
  return rows;
}

std::string comparison_table(const std::vector<CompareRow>& rows) {
  auto fixed = [](std::optional<double> v) {
    return v && std::isfinite(*v) ? fmt::format("{:.4f}", *v) : std::string("-");
  };
  std::string s =
      "| placement | status | steps | train loss (last 20 steps) | val loss | bits/byte | "
      "tokens/s (run average) | wall s |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {:.0f} | {:.1f} |\n", to_string(r.placement),
                     r.status(), r.result.steps,
                     fixed(r.result.train_loss_steps > 0 ? std::optional<double>(r.result.train_loss)
                                                         : std::nullopt),
                     fixed(r.val_loss), fixed(r.bits_per_byte), r.result.tokens_per_s,
                     r.result.wall_s);
  return s;
}

}  // namespace normlab
