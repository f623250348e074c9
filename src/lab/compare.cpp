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
#include "normlab/config_file.h"
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

std::string compare_run_dir(const std::string& out_dir, const CompareVariant& v, int seed) {
  return (fs::path(out_dir) / seed_dir_name(v.name, seed)).string();
}

std::vector<CompareVariant> placement_variants(const std::vector<Placement>& placements) {
  std::vector<CompareVariant> out;
  for (Placement p : placements) {
    const std::string n(to_string(p));
    out.push_back({n, n, "placement", [p](Config& c) { c.model.placement = p; }});
  }
  return out;
}

std::vector<CompareVariant> vary_variants(const Config& base, const std::string& spec) {
  const auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 >= spec.size())
    throw ConfigError({fmt::format("--vary {}: expected KEY=v1,v2,... (e.g. optim.name=adamw,muon)",
                                   spec)});
  const std::string key = spec.substr(0, eq);
  std::vector<std::string> values;
  for (std::size_t a = eq + 1;;) {
    const auto b = spec.find(',', a);
    values.push_back(spec.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  std::vector<CompareVariant> out;
  std::vector<std::string> problems;
  const std::string text = dump_config_toml(base);
  for (const auto& v : values) {
    const std::string set = key + "=" + v;
    try {  // every value checked before anything trains
      (void)parse_config(text, "compare --vary", {set});
    } catch (const ConfigError& e) {
      for (const auto& p : e.problems) problems.push_back("--vary " + set + ": " + p);
    }
    const std::string name = key.substr(key.find('.') + 1) + "-" + v;
    out.push_back({name, set, key, [text, set](Config& c) {
                     const std::uint64_t seed = c.train.seed;  // the seed index's, kept
                     c = parse_config(text, "compare --vary", {set});
                     c.train.seed = seed;
                   }});
  }
  if (!problems.empty()) throw ConfigError(problems);
  return out;
}

namespace {
nlohmann::json num(std::optional<double> v) {
  return v && std::isfinite(*v) ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json row_json(const CompareRow& r, bool seeded) {
  nlohmann::json o = {{"placement", to_string(r.placement)}};
  if (r.axis != "placement") o["variant"] = r.variant;
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
  std::string placement;  // the variant's label
  std::vector<const CompareRow*> runs;
  SeedStats train_loss, val_loss, bits_per_byte, tokens_per_s, wall_s, steps;
  std::string status;  // "done" when all are, else "2 done, 1 diverged"
};

std::vector<PlacementSeeds> by_placement(const std::vector<CompareRow>& rows) {
  std::vector<PlacementSeeds> out;
  for (const auto& r : rows) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const PlacementSeeds& g) { return g.placement == r.variant; });
    if (it == out.end()) {
      out.emplace_back();
      out.back().placement = r.variant;
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
  for (const auto& g : groups) cells.emplace_back(g.placement, g.val_loss);
  return seed_spread_notes(cells, "val loss");
}
}  // namespace

std::vector<CompareRow> run_comparison(
    const Config& base, const std::vector<Placement>& placements, const std::string& out_dir,
    const TrainHooks& hooks, int seeds,
    const std::function<void(Placement, int seed, const std::string& dir)>& on_start) {
  return run_comparison(base, placement_variants(placements), out_dir, hooks, seeds,
                        [&](const CompareVariant& v, int k, const std::string& dir) {
                          if (on_start) on_start(*enum_from_string<Placement>(v.name), k, dir);
                        });
}

std::vector<CompareRow> run_comparison(
    const Config& base, const std::vector<CompareVariant>& variants, const std::string& out_dir,
    const TrainHooks& hooks, int seeds,
    const std::function<void(const CompareVariant&, int seed, const std::string& dir)>& on_start) {
  if (seeds < 1) throw ConfigError({fmt::format("seeds = {} must be >= 1", seeds)});
  std::vector<CompareRow> rows;
  for (const CompareVariant& v : variants)
    for (int k = 0; k < seeds; ++k) {
      Config cfg = base;
      cfg.train.seed = base.train.seed + static_cast<std::uint64_t>(k);
      v.apply(cfg);
      validate(cfg);
      const std::string dir = compare_run_dir(out_dir, v, k);
      if (on_start) on_start(v, k, dir);
      const bool resume = fs::exists(fs::path(dir) / "checkpoints" / "latest");
      Trainer trainer(cfg, dir, resume);
      CompareRow row;
      row.placement = cfg.model.placement;
      row.variant = v.label;
      row.axis = v.axis;
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
    // Several seeds: the runs, then each variant's statistics over its seeds.
    j = {{"seeds", seeds}, {"runs", runs}, {"placements", nlohmann::json::array()}};
    const auto groups = by_placement(rows);
    for (const auto& g : groups)
      j["placements"].push_back({{"placement", g.placement},
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
    return seeded ? fmt::format("{} (seed {})", r.variant, r.train_seed) : r.variant;
  };
  // The first column: "placement", or "variant" for a comparison over another key.
  const std::string axis = rows.empty() || rows.front().axis == "placement" ? "placement" : "variant";
  std::string s;
  if (seeded) {
    const auto groups = by_placement(rows);
    s += "| " + axis + " | seeds | status | steps | train loss (last 20 steps) | val loss | bits/byte | "
         "tokens/s (run average) | wall s |\n"
         "|---|---|---|---|---|---|---|---|---|\n";
    for (const auto& g : groups)
      s += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", g.placement,
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
  s += "| " + axis + " | status | steps | train loss (last 20 steps) | val loss | bits/byte | "
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
