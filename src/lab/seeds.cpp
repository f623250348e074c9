#include "lab/seeds.h"

#include <algorithm>

#include <fmt/format.h>

namespace normlab {

std::string seed_dir_name(const std::string& cell, int k) {
  return k == 0 ? cell : fmt::format("{}_seed{}", cell, k);
}

SeedStats seed_stats(const std::vector<double>& xs) {
  SeedStats s;
  double sum = 0;
  for (double x : xs)
    if (std::isfinite(x)) {
      sum += x;
      s.min = s.n == 0 ? x : std::min(s.min, x);
      s.max = s.n == 0 ? x : std::max(s.max, x);
      ++s.n;
    }
  if (s.n == 0) return s;
  s.mean = sum / s.n;
  if (s.n >= 2) {
    double ss = 0;
    for (double x : xs)
      if (std::isfinite(x)) ss += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(ss / (s.n - 1));
  }
  return s;
}

std::string format_spread(const SeedStats& s, int digits) {
  if (s.n == 0) return "-";
  if (s.n == 1) return fmt::format("{:.{}f}", s.mean, digits);
  return fmt::format("{:.{}f} ± {:.{}f} ({:.{}f}–{:.{}f})", s.mean, digits, s.std, digits, s.min,
                     digits, s.max, digits);
}

nlohmann::json seed_stats_json(const SeedStats& s) {
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"n", s.n}, {"mean", num(s.mean)}, {"std", num(s.std)}, {"min", num(s.min)},
          {"max", num(s.max)}};
}

bool within_seed_spread(const SeedStats& a, const SeedStats& b) {
  if (a.n < 2 || b.n < 2) return false;
  return std::fabs(a.mean - b.mean) <= std::max(a.std, b.std);
}

std::vector<std::string> seed_spread_notes(
    const std::vector<std::pair<std::string, SeedStats>>& cells, const std::string& quantity,
    int digits) {
  std::vector<std::string> notes;
  for (std::size_t i = 0; i < cells.size(); ++i)
    for (std::size_t j = i + 1; j < cells.size(); ++j) {
      const SeedStats& a = cells[i].second;
      const SeedStats& b = cells[j].second;
      if (!within_seed_spread(a, b)) continue;
      notes.push_back(fmt::format("{} vs {}: {} difference {:.{}f} is within the seed spread (std {:.{}f})",
                                  cells[i].first, cells[j].first, quantity,
                                  std::fabs(a.mean - b.mean), digits, std::max(a.std, b.std),
                                  digits));
    }
  return notes;
}

}  // namespace normlab
