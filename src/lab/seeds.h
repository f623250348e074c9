// Seeds: a study cell (a placement of `compare`, a grid point of `sweep`) trained with N seeds.
// Seed k of a cell trains with train.seed + k, which moves both the initialisation and the data
// order (the batch sampler's seed derives from train.seed); seed 0 is the single-seed run itself,
// bitwise, in the directory it has always had. Summaries give each quantity over the seeds as
// mean ± sample standard deviation (n - 1) and min–max, and say where two cells differ by no more
// than that spread.
#pragma once
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace normlab {

// The run directory name of seed k of a cell: the cell's own name for k = 0 (the layout of a
// single-seed study), CELL_seedK otherwise.
std::string seed_dir_name(const std::string& cell, int k);

struct SeedStats {
  int n = 0;  // finite values counted
  double mean = NAN, std = NAN, min = NAN, max = NAN;  // std: sample (n - 1); NaN for n < 2
};

// Over the finite values of xs (non-finite ones, such as a diverged run's, are left out).
SeedStats seed_stats(const std::vector<double>& xs);

// "1.6157 ± 0.0123 (1.6010–1.6371)"; one value alone: "1.6157"; none: "-". digits after the point.
std::string format_spread(const SeedStats& s, int digits = 4);

// {"n", "mean", "std", "min", "max"} (null where not finite).
nlohmann::json seed_stats_json(const SeedStats& s);

// True when two cells' means differ by no more than the larger of their seed standard
// deviations (both need n >= 2): the seeds cannot tell them apart.
bool within_seed_spread(const SeedStats& a, const SeedStats& b);

// One note per pair of cells whose difference is within the seed spread:
// "pre vs peri: val loss difference 0.0200 is within the seed spread (std 0.0300)".
std::vector<std::string> seed_spread_notes(
    const std::vector<std::pair<std::string, SeedStats>>& cells, const std::string& quantity,
    int digits = 4);

}  // namespace normlab
