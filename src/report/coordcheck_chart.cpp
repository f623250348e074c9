#include "report/coordcheck_chart.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace normlab::report {

svg::LineChart coordcheck_chart(const CoordcheckResult& r) {
  svg::LineChart c;
  c.id = "coordcheck";
  const int last = r.settings.steps;
  c.title = "Coordinate check: activation size against width";
  c.subtitle = fmt::format("after {} step{} ({} seed{}); solid: mup, dashed: standard", last,
                           last == 1 ? "" : "s", r.settings.seeds, r.settings.seeds == 1 ? "" : "s");
  c.x.label = "d_model";
  c.x.log = true;
  for (int w : r.settings.widths) c.x.ticks.push_back(w);
  c.y.label = "RMS (attn_max_logit: largest |score|)";
  c.y.log = true;
  const auto& names = r.activations;
  for (Parametrization p : r.settings.parametrizations)
    for (std::size_t a = 0; a < names.size(); ++a) {
      svg::Series s;
      s.label = fmt::format("{} {} (slope {:+.2f})", to_string(p), names[a], r.slope(p, a, last));
      for (const CoordcheckCurve& cv : r.curves)
        if (cv.parametrization == p) {
          s.x.push_back(cv.width);
          s.y.push_back(cv.rms[a][last]);
        }
      s.color = svg::palette(a);
      s.dashed = p == Parametrization::standard;
      s.markers = true;
      c.series.push_back(std::move(s));
    }
  return c;
}

nlohmann::json write_coordcheck(const std::string& dir, const Config& base, const CoordcheckResult& r) {
  const std::filesystem::path d(dir);
  std::filesystem::create_directories(d);
  nlohmann::json j = coordcheck_json(base, r);
  std::ofstream(d / "coordcheck.json") << j.dump(1) << '\n';
  std::ofstream(d / "coordcheck.md") << coordcheck_table(r);
  std::ofstream(d / "coordcheck.svg") << svg::render(coordcheck_chart(r), true);
  return j;
}

std::string coordcheck_table_html(const CoordcheckResult& r) {
  const int last = r.settings.steps;
  std::string o = "<table class=\"coordcheck\"><thead><tr><th>parametrization</th><th>activation</th>";
  for (int w : r.settings.widths) o += fmt::format("<th>d={}</th>", w);
  o += fmt::format("<th>slope at step 1</th><th>slope at step {}</th></tr></thead><tbody>\n", last);
  const auto& names = r.activations;
  for (Parametrization p : r.settings.parametrizations)
    for (std::size_t a = 0; a < names.size(); ++a) {
      o += fmt::format("<tr><td>{}</td><td>{}</td>", to_string(p), names[a]);
      for (int w : r.settings.widths)
        for (const CoordcheckCurve& cv : r.curves)
          if (cv.parametrization == p && cv.width == w) o += fmt::format("<td>{:.4g}</td>", cv.rms[a][last]);
      o += fmt::format("<td>{:+.2f}</td><td>{:+.2f}</td></tr>\n", r.slope(p, a, 1), r.slope(p, a, last));
    }
  return o + "</tbody></table>\n";
}

}  // namespace normlab::report
