#include "lab/compare.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace normlab {

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
    CompareRow row;
    row.placement = p;
    row.run_dir = dir;
    row.result = trainer.run(hooks);
    if (row.result.stop_reason == "interrupted") {
      rows.push_back(row);
      break;
    }
    row.val_loss = row.result.val_loss ? *row.result.val_loss : trainer.evaluate();
    row.bits_per_byte = row.val_loss / std::log(2.0);
    rows.push_back(row);
  }
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows)
    j.push_back({{"placement", to_string(r.placement)},
                 {"run_dir", r.run_dir},
                 {"final_train_loss", r.result.final_loss},
                 {"val_loss", r.val_loss},
                 {"bits_per_byte", r.bits_per_byte},
                 {"diverged", r.result.diverged},
                 {"tokens_per_s", r.result.tokens_per_s},
                 {"wall_s", r.result.wall_s}});
  fs::create_directories(out_dir);
  std::ofstream(fs::path(out_dir) / "summary.json") << j.dump(2) << '\n';
  std::ofstream(fs::path(out_dir) / "summary.md") << comparison_table(rows);
  return rows;
}

std::string comparison_table(const std::vector<CompareRow>& rows) {
  std::string s =
      "| placement | final train loss | val loss | bits/byte | diverged | tokens/s | wall s |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s += fmt::format("| {} | {:.4f} | {:.4f} | {:.4f} | {} | {:.0f} | {:.1f} |\n",
                     to_string(r.placement), r.result.final_loss, r.val_loss, r.bits_per_byte,
                     r.result.diverged ? "yes" : "no", r.result.tokens_per_s, r.result.wall_s);
  return s;
}

}  // namespace normlab
