#include "lab/compare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/metrics.h"
#include "lab/seeds.h"
#include "normlab/errors.h"
#include "normlab/metrics.h"
#include "train/divergence.h"

namespace fs = std::filesystem;

namespace normlab {

std::string CompareRow::status() const {
  return result.stop_reason == "interrupted" ? "interrupted" : result.diverged ? "diverged" : "done";
}

std::string compare_run_dir(const std::string& out_dir, Placement p, int seed) {
  return (fs::path(out_dir) / seed_dir_name(std::string(to_string(p)), seed)).string();
}

namespace {
nlohmann::json num(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json row_json(const CompareRow& r, bool seeded) {
  nlohmann::json o = {{"placement", to_string(r.placement)}};
  if (seeded) {
    o["seed"] = r.seed;
    o["train_seed"] = r.train_seed;
  }
  o.update({{"run_dir", r.run_dir},
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
  return o;
}

double value_or_nan(std::optional<double> v) { return v ? *v : NAN; }

// The runs of one placement, in seed order, and their statistics.
struct PlacementSeeds {
  Placement placement;
  std::vector<const CompareRow*> runs;
  SeedStats train_loss, val_loss, bits_per_byte, tokens_per_s, wall_s, steps;
  std::string status;  // "done" when all are, else "2 done, 1 diverged"
};

std::vector<PlacementSeeds> by_placement(const std::vector<CompareRow>& rows) {
  std::vector<PlacementSeeds> out;
  for (const auto& r : rows) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const PlacementSeeds& g) { return g.placement == r.placement; });
    if (it == out.end()) {
      out.emplace_back();
      out.back().placement = r.placement;
      it = out.end() - 1;
    }
    it->runs.push_back(&r);
  }
  for (auto& g : out) {
    std::vector<double> tl, vl, bpb, tps, wall, steps;
    std::map<std::string, int> counts;
    std::vector<std::string> order;
    for (const CompareRow* r : g.runs) {
      tl.push_back(r->result.train_loss_steps > 0 ? r->result.train_loss : NAN);
      vl.push_back(value_or_nan(r->val_loss));
      bpb.push_back(value_or_nan(r->bits_per_byte));
      tps.push_back(r->result.tokens_per_s);
      wall.push_back(r->result.wall_s);
      steps.push_back(static_cast<double>(r->result.steps));
      if (!counts.count(r->status())) order.push_back(r->status());
      ++counts[r->status()];
    }
    g.train_loss = seed_stats(tl);
    g.val_loss = seed_stats(vl);
    g.bits_per_byte = seed_stats(bpb);
    g.tokens_per_s = seed_stats(tps);
    g.wall_s = seed_stats(wall);
    g.steps = seed_stats(steps);
    if (order.size() == 1) {
      g.status = order[0];
    } else {
      for (const auto& st : order)
        g.status += fmt::format("{}{} {}", g.status.empty() ? "" : ", ", counts[st], st);
    }
  }
  return out;
}

bool is_seeded(const std::vector<CompareRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const CompareRow& r) { return r.seed > 0; });
}

std::vector<std::string> val_loss_notes(const std::vector<PlacementSeeds>& groups) {
  std::vector<std::pair<std::string, SeedStats>> cells;
  for (const auto& g : groups) cells.emplace_back(std::string(to_string(g.placement)), g.val_loss);
  return seed_spread_notes(cells, "val loss");
}
}  // namespace

std::vector<CompareRow> run_comparison(
    const Config& base, const std::vector<Placement>& placements, const std::string& out_dir,
    const TrainHooks& hooks, int seeds,
    const std::function<void(Placement, int seed, const std::string& dir)>& on_start) {
  if (seeds < 1) throw ConfigError({fmt::format("seeds = {} must be >= 1", seeds)});
  std::vector<CompareRow> rows;
  for (Placement p : placements)
    for (int k = 0; k < seeds; ++k) {
      Config cfg = base;
      cfg.model.placement = p;
      cfg.train.seed = base.train.seed + static_cast<std::uint64_t>(k);
      validate(cfg);
      const std::string dir = compare_run_dir(out_dir, p, k);
      if (on_start) on_start(p, k, dir);
      const bool resume = fs::exists(fs::path(dir) / "checkpoints" / "latest");
      Trainer trainer(cfg, dir, resume);
      CompareRow row;
      row.placement = p;
      row.seed = k;
      row.train_seed = cfg.train.seed;
      row.run_dir = dir;
      row.result = trainer.run(with_divergence_rule(hooks, trainer, dir));
      if (row.result.stop_reason == "interrupted") {
        rows.push_back(row);
        return rows;
      }
      row.val_loss = row.result.val_loss ? *row.result.val_loss : trainer.evaluate();
      row.bits_per_byte = *row.val_loss / std::log(2.0) / trainer.val_bytes_per_token();
      rows.push_back(row);
    }
  const bool seeded = seeds > 1;
  nlohmann::json runs = nlohmann::json::array();
  for (const auto& r : rows) runs.push_back(row_json(r, seeded));
  nlohmann::json j = runs;
  if (seeded) {
    // Several seeds: the runs, then each placement's statistics over its seeds.
    j = {{"seeds", seeds}, {"runs", runs}, {"placements", nlohmann::json::array()}};
    const auto groups = by_placement(rows);
    for (const auto& g : groups)
      j["placements"].push_back({{"placement", to_string(g.placement)},
                                 {"seeds", g.runs.size()},
                                 {"status", g.status},
                                 {"train_loss", seed_stats_json(g.train_loss)},
                                 {"val_loss", seed_stats_json(g.val_loss)},
                                 {"bits_per_byte", seed_stats_json(g.bits_per_byte)},
                                 {"tokens_per_s", seed_stats_json(g.tokens_per_s)},
                                 {"wall_s", seed_stats_json(g.wall_s)}});
    j["notes"] = val_loss_notes(groups);
  }
  fs::create_directories(out_dir);
  std::ofstream(fs::path(out_dir) / "summary.json") << j.dump(2) << '\n';
  std::ofstream(fs::path(out_dir) / "summary.md") << comparison_table(rows);
  return rows;
}

std::vector<CompareRow> run_comparison(const Config& base, const std::vector<Placement>& placements,
                                       const std::string& out_dir, const TrainHooks& hooks,
                                       const std::function<void(Placement)>& on_start) {
  return run_comparison(base, placements, out_dir, hooks, 1,
                        [&](Placement p, int, const std::string&) {
                          if (on_start) on_start(p);
                        });
}

std::string comparison_table(const std::vector<CompareRow>& rows) {
  auto fixed = [](std::optional<double> v) {
    return v && std::isfinite(*v) ? fmt::format("{:.4f}", *v) : std::string("-");
  };
  const bool seeded = is_seeded(rows);
  auto name = [&](const CompareRow& r) {
    return seeded ? fmt::format("{} (seed {})", to_string(r.placement), r.train_seed)
                  : std::string(to_string(r.placement));
  };
  std::string s;
  if (seeded) {
    const auto groups = by_placement(rows);
    s += "| placement | seeds | status | steps | train loss (last 20 steps) | val loss | bits/byte | "
         "tokens/s (run average) | wall s |\n"
         "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& g : groups)
      s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", to_string(g.placement),
                       g.runs.size(), g.status,
                       g.steps.min == g.steps.max ? fmt::format("{:.0f}", g.steps.min)
                                                  : format_spread(g.steps, 0),
                       format_spread(g.train_loss), format_spread(g.val_loss),
                       format_spread(g.bits_per_byte), format_spread(g.tokens_per_s, 0),
                       format_spread(g.wall_s, 1));
    s += "\nmean ± sample standard deviation (min–max) over the seeds; seed k trains with "
         "train.seed + k (initialisation and data order).\n";
    const auto notes = val_loss_notes(groups);
    for (const auto& n : notes) s += "\n" + n + ".";
    if (!notes.empty()) s += "\n";
    s += "\nEvery run:\n\n";
  }
  s += "| placement | status | steps | train loss (last 20 steps) | val loss | bits/byte | "
       "tokens/s (run average) | wall s |\n"
       "|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows)
    s += fmt::format("| {} | {} | {} | {} | {} | {} | {:.0f} | {:.1f} |\n", name(r),
                     r.status(), r.result.steps,
                     fixed(r.result.train_loss_steps > 0 ? std::optional<double>(r.result.train_loss)
                                                         : std::nullopt),
                     fixed(r.val_loss), fixed(r.bits_per_byte), r.result.tokens_per_s,
                     r.result.wall_s);
  return s;
}

}  // namespace normlab
