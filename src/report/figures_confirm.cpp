// The confirmation figures of the report (`doctor --confirm`, lab/confirm.h): for every run with
// RUN/confirm/confirmation.json, one chart per confirmed problem: the deciding statistic over the
// replay window, the mean over the seeds of the control and of each treatment with the min-max
// over the seeds as a band, the condition's threshold dashed; and under it the verdict table.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "io/metrics.h"
#include "lab/confirm_run.h"
#include "lab/seeds.h"
#include "report/figures.h"
#include "report/figures_detail.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace normlab::report::figures_detail {

namespace {

std::string num(const json& v) {
  return v.is_number() ? fmt::format("{:.4g}", v.get<double>()) : std::string("-");
}

// One arm's curve: per step, the mean over the seeds that logged it, and the min and max.
svg::Series arm_series(const std::string& label, const std::string& dir, const std::string& name,
                       int seeds, const std::string& stat, long start, long end,
                       const std::string& color) {
  std::map<long, std::vector<double>> at;
  for (int k = 0; k < seeds; ++k) {
    const fs::path d = fs::path(dir) / seed_dir_name(name, k);
    if (!fs::exists(d / "metrics.jsonl")) continue;
    for (const auto& [s, v] : statistic_series(stat, read_metrics(d.string()), start, end))
      at[s].push_back(v);
  }
  svg::Series sr = line(label, {}, {}, color);
  for (const auto& [s, vs] : at) {
    const SeedStats st = seed_stats(vs);
    sr.x.push_back(static_cast<double>(s));
    sr.y.push_back(st.mean);
    sr.band_lo.push_back(st.min);
    sr.band_hi.push_back(st.max);
  }
  return sr;
}

std::string verdict_table(const json& c) {
  std::string t =
      "<table class=\"lr\"><thead><tr><th>arm</th><th>changes</th><th>" +
      h(c.value("statistic", "")) +
      " per seed</th><th>mean ± std</th><th>loss at the end</th><th>verdict</th></tr></thead>"
      "<tbody>";
  std::map<std::string, json> verdicts;
  for (const auto& v : c.value("verdicts", json::array())) verdicts[v.value("arm", "")] = v;
  std::map<std::string, json> sets;
  for (const auto& a : c.value("arms", json::array()))
    sets[a.value("name", "")] = a.value("set", json());
  for (const auto& a : c.value("arm_results", json::array())) {
    const std::string name = a.value("name", "");
    std::string per_seed, changes;
    for (const auto& x : a.value("statistic", json::array()))
      per_seed += (per_seed.empty() ? "" : ", ") + num(x);
    if (sets[name].is_object())
      for (const auto& [k, v] : sets[name].items())
        changes += (changes.empty() ? "" : ", ") + k + " = " +
                   (v.is_string() ? v.get<std::string>() : v.dump());
    const json st = a.value("statistic_stats", json::object()),
               ls = a.value("loss_end_stats", json::object());
    const json v = verdicts.count(name) ? verdicts[name] : json::object();
    t += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{} ± {}</td><td>{}</td><td>{}</td></tr>", h(name),
        h(changes.empty() ? "(the run's config)" : changes), h(per_seed),
        num(st.value("mean", json())), num(st.value("std", json())), num(ls.value("mean", json())),
        v.empty() ? std::string()
                  : "<b>" + h(v.value("verdict", "")) + "</b>: " + h(v.value("reason", "")));
  }
  return t + "</tbody></table>";
}

}  // namespace

void confirmation_figures(const Builder& b_) {
  Builder b{b_};  // add() appends to the figures the builder points to
  for (const auto& v : b.cx.runs) {
    const fs::path file = fs::path(v.run->dir) / "confirm" / "confirmation.json";
    if (!fs::exists(file)) continue;
    json all;
    try {
      std::ifstream in(file);
      all = json::parse(in);
    } catch (const std::exception&) {
      continue;  // a torn file: nothing to draw
    }
    for (const auto& c : all.value("confirmation", json::array())) {
      const std::string stat = c.value("statistic", ""), kind = c.value("problem", "");
      const long start = c.value("start_step", 0L), end = c.value("window_end", 0L);
      const int seeds = c.value("seeds", 1);
      Figure f;
      f.name = fmt::format("confirm_{}_{}", v.run->name, kind);
      for (char& ch : f.name)
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-')) ch = '_';
      f.chart.title = fmt::format("{}: confirming the remedies for {}", v.run->name, kind);
      f.chart.subtitle = fmt::format(
          "{} over the replay (steps {}..{}), mean over {} seeds, band: "
          "min-max; dashed: the condition's threshold",
          stat, start + 1, end, seeds);
      f.chart.x = axis("step");
      f.chart.y = axis(stat, stat == "attn_max_logit" || stat == "resid_rms");
      std::size_t i = 0;
      for (const auto& a : c.value("arms", json::array())) {
        if (a.contains("cannot")) continue;
        const std::string name = a.value("name", "");
        f.chart.series.push_back(
            arm_series(name, c.value("dir", ""), name, seeds, stat, start, end, svg::palette(i++)));
      }
      if (c.value("threshold", json()).is_number() && stat != "spike_count" &&
          stat != "unigram_gap") {
        svg::Series th =
            line("threshold", {static_cast<double>(start + 1), static_cast<double>(end)},
                 {c["threshold"].get<double>(), c["threshold"].get<double>()}, "#888888");
        th.dashed = true;
        f.chart.series.push_back(std::move(th));
      }
      f.caption = fmt::format(
          "doctor --confirm on {}: {} (replay from step {}; {}). Control replay of the original: "
          "{}.",
          v.run->name, kind, start, c.value("start_why", ""), c.value("replay_check", ""));
      f.table_html = verdict_table(c);
      b.add(std::move(f), "the confirmation's arms have no step record with " + stat);
    }
  }
}

}  // namespace normlab::report::figures_detail
