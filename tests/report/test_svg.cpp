// The SVG chart library: tick values and labels (log axes with minor ticks between decades),
// linear and log scales, gaps at missing values, escaping of text, charts with nothing to draw,
// the palette.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <sstream>

#include "report/svg.h"

namespace normlab::svg {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// The `d` attribute of every series path (marks excluded), in order.
std::vector<std::string> series_paths(const std::string& svg) {
  // A plain scan (std::regex recursed deep enough on long paths to need a 64 MiB stack under ASan).
  std::vector<std::string> out;
  const std::string open = "<path d=\"", tail = "\" fill=\"none\"";
  for (std::size_t at = svg.find(open); at != std::string::npos; at = svg.find(open, at + 1)) {
    const std::size_t b = at + open.size(), e = svg.find('"', b);
    if (e == std::string::npos) break;
    if (svg.compare(e, tail.size(), tail) == 0) out.push_back(svg.substr(b, e - b));
  }
  return out;
}

// The points of a path "M x y L x y ... M x y L ...", one vector per sub-path.
std::vector<std::vector<std::pair<double, double>>> subpaths(const std::string& d) {
  std::vector<std::vector<std::pair<double, double>>> out;
  std::istringstream in(d);
  std::string cmd;
  while (in >> cmd) {
    const char c = cmd[0];
    double x = std::stod(cmd.substr(1)), y;
    in >> y;
    if (c == 'M') out.emplace_back();
    out.back().emplace_back(x, y);
  }
  return out;
}

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

LineChart chart_of(std::vector<double> x, std::vector<double> y, bool logy = false) {
  LineChart c;
  c.title = "t";
  c.y.log = logy;
  Series s;
  s.label = "s";
  s.x = std::move(x);
  s.y = std::move(y);
  c.series.push_back(s);
  return c;
}

TEST(SvgTicks, NiceLinearTicks) {
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(nice_ticks(0, 100, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const auto t = nice_ticks(-3, 7, 5);
  EXPECT_EQ(t, (std::vector<double>{-2, 0, 2, 4, 6}));
  EXPECT_FALSE(std::signbit(t[1]));  // exactly 0, not -0 or 1e-17
  EXPECT_DOUBLE_EQ(nice_step(0, 1000, 5), 200);
  EXPECT_DOUBLE_EQ(nice_step(2.14, 2.26, 5), 0.02);
  EXPECT_TRUE(nice_ticks(kNaN, 1).empty());
  EXPECT_EQ(nice_ticks(5, 5).size(), 1u);  // a degenerate range still gets its value
}

TEST(SvgTicks, LabelsAreShortAndExact) {
  EXPECT_EQ(tick_label(0.30000000000000004, 0.1), "0.3");
  EXPECT_EQ(tick_label(0.6000000000000001, 0.2), "0.6");
  EXPECT_EQ(tick_label(1e-17, 0.2), "0");
  EXPECT_EQ(tick_label(100000, 20000), "100000");
  EXPECT_EQ(tick_label(2.14, 0.02), "2.14");
  EXPECT_EQ(tick_label(4e6, 2e6), "4e6");
  EXPECT_EQ(compact_number(0.003), "3e-3");
  EXPECT_EQ(compact_number(-0.0001), "-1e-4");
  EXPECT_EQ(compact_number(2.5e6), "2.5e6");
  EXPECT_EQ(compact_number(1500), "1500");
  EXPECT_EQ(compact_number(0.25), "0.25");
  EXPECT_EQ(compact_number(0.01), "0.01");
  EXPECT_EQ(compact_number(3.14159), "3.142");
  EXPECT_EQ(compact_number(0), "0");
  EXPECT_EQ(compact_number(kNaN), "nan");
}

TEST(SvgTicks, LogTicks) {
  EXPECT_EQ(log_ticks(1e-4, 1e2), (std::vector<double>{1e-4, 1e-3, 1e-2, 1e-1, 1, 10, 100}));
  // Twenty decades: every third one.
  EXPECT_EQ(log_ticks(1e-10, 1e10), (std::vector<double>{1e-9, 1e-6, 1e-3, 1, 1e3, 1e6, 1e9}));
  EXPECT_EQ(compact_number(log_ticks(1e-4, 1e-1)[1]), "1e-3");
  // Within a few decades: round mantissas, all inside the range, nothing left long unlabelled.
  for (auto [lo, hi] : {std::pair{2.0, 40.0}, {0.72, 1.75}, {2.9, 20.0}, {2.6e-4, 1.1e-2}, {1.9, 2.3}}) {
    const auto t = log_ticks(lo, hi);
    ASSERT_GE(t.size(), 2u) << lo << ".." << hi;
    EXPECT_LE(t.size(), 9u) << lo << ".." << hi;
    for (double v : t) {
      EXPECT_GE(v, lo * (1 - 1e-9));
      EXPECT_LE(v, hi * (1 + 1e-9));
      EXPECT_LE(compact_number(v).size(), 5u) << v;  // round numbers
    }
    for (std::size_t i = 1; i < t.size(); ++i) EXPECT_GT(t[i], t[i - 1]);
  }
  const auto loss = log_ticks(1.8, 43);
  for (double v : {2.0, 5.0, 10.0, 20.0}) EXPECT_NE(std::find(loss.begin(), loss.end(), v), loss.end()) << v;
  EXPECT_TRUE(log_ticks(0, 10).empty());
  EXPECT_TRUE(log_ticks(-1, 10).empty());
}

TEST(SvgTicks, LogMinorTicksBetweenDecades) {
  // Two decades labelled at 1, 10, 100: grid lines at 2..9 and 20..90, labels at 2, 5, 20, 50.
  const std::vector<double> major = {1, 10, 100};
  EXPECT_EQ(log_minor_ticks(1, 100, major),
            (std::vector<double>{2, 3, 4, 5, 6, 7, 8, 9, 20, 30, 40, 50, 60, 70, 80, 90}));
  EXPECT_EQ(log_minor_labels(1, 100, major), (std::vector<double>{2, 5, 20, 50}));
  // Below one and part decades: only what lies inside, none that is already major.
  EXPECT_EQ(log_minor_ticks(0.03, 0.2, {0.05, 0.1, 0.2}), (std::vector<double>{0.03, 0.04, 0.06, 0.07, 0.08, 0.09}));
  // Majors between decades already (1-2-5): no minor labels. Wide axes: no minor ticks at all.
  EXPECT_TRUE(log_minor_labels(1, 20, {1, 2, 5, 10, 20}).empty());
  EXPECT_TRUE(log_minor_ticks(1e-5, 1e5, {1e-5, 1, 1e5}).empty());
  EXPECT_TRUE(log_minor_labels(1e-5, 1e1, {1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1, 10}).empty());  // six decades
  // As drawn: a log axis over 0.5 .. 2000 (labelled at the decades) gets light grid lines and
  // labels at 0.5, 2, 5, 20, 50, 200, 500, 2000.
  const std::string svg = render(chart_of({0, 1, 2}, {0.5, 9, 2000}, true));
  EXPECT_NE(svg.find("class=\"grid minor\""), std::string::npos);
  EXPECT_EQ(count(svg, "<text class=\"minor\""), 8u);
  for (const char* label : {"0.5", "2", "5", "20", "50", "200", "500", "2000"})
    EXPECT_NE(svg.find(std::string("fill=\"#888\">") + label + "</text>"), std::string::npos) << label;
  // Explicit ticks at swept values that are not decades (1e-3, 0.3): the decades between are
  // labelled too, except where one would crowd a tick (1e-3 itself).
  LineChart lr = chart_of({1e-3, 0.3}, {2.5, 2.4});
  lr.x.log = true;
  lr.x.ticks = {1e-3, 0.3};
  const std::string lsvg = render(lr);
  EXPECT_NE(lsvg.find("fill=\"#888\">0.01</text>"), std::string::npos);
  EXPECT_NE(lsvg.find("fill=\"#888\">0.1</text>"), std::string::npos);
  EXPECT_EQ(count(lsvg, "<text class=\"minor\""), 2u);
}

TEST(SvgChart, PaletteIsColourBlindSafeAndDistinct) {
  // Okabe-Ito: eight distinct colors, then the same colors with dash-dot, then dotted strokes.
  std::set<std::string> colors, styles;
  for (std::size_t i = 0; i < 8; ++i) colors.insert(palette(i));
  EXPECT_EQ(colors.size(), 8u);
  EXPECT_TRUE(colors.contains("#0072b2") && colors.contains("#d55e00") && colors.contains("#009e73"));
  for (std::size_t i = 0; i < 24; ++i) styles.insert(palette(i) + "/" + dash_pattern(i));
  EXPECT_EQ(styles.size(), 24u);
  EXPECT_EQ(dash_pattern(0), "");
  // A ninth series without a color of its own is drawn dash-dot, in the legend too.
  LineChart c = chart_of({0, 1}, {0, 1});
  for (int i = 0; i < 8; ++i) c.series.push_back(c.series[0]);
  const std::string svg = render(c);
  EXPECT_EQ(count(svg, "stroke-dasharray=\"8 3 2 3\""), 2u);  // its line and its legend entry
}

TEST(SvgChart, LinearScaleIsLinear) {
  const std::string svg = render(chart_of({0, 1, 2, 3}, {0, 1, 2, 3}));
  const auto p = series_paths(svg);
  ASSERT_EQ(p.size(), 1u);
  const auto sp = subpaths(p[0]);
  ASSERT_EQ(sp.size(), 1u);
  ASSERT_EQ(sp[0].size(), 4u);
  const double dx = sp[0][1].first - sp[0][0].first, dy = sp[0][1].second - sp[0][0].second;
  EXPECT_GT(dx, 0);
  EXPECT_LT(dy, 0);  // y grows upward
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_NEAR(sp[0][i].first - sp[0][i - 1].first, dx, 0.02);
    EXPECT_NEAR(sp[0][i].second - sp[0][i - 1].second, dy, 0.02);
  }
}

TEST(SvgChart, LogScaleSpacesDecadesEqually) {
  LineChart c = chart_of({1e-4, 1e-3, 1e-2, 1e-1}, {1, 10, 100, 1000}, true);
  c.x.log = true;
  c.y.label = "loss";
  const std::string svg = render(c);
  const auto sp = subpaths(series_paths(svg).at(0));
  ASSERT_EQ(sp.size(), 1u);
  ASSERT_EQ(sp[0].size(), 4u);
  const double dx = sp[0][1].first - sp[0][0].first, dy = sp[0][1].second - sp[0][0].second;
  for (std::size_t i = 2; i < 4; ++i) {
    EXPECT_NEAR(sp[0][i].first - sp[0][i - 1].first, dx, 0.02);
    EXPECT_NEAR(sp[0][i].second - sp[0][i - 1].second, dy, 0.02);
  }
  EXPECT_NE(svg.find(">1e-3</text>"), std::string::npos);  // decade tick labels
  EXPECT_NE(svg.find(">1000</text>"), std::string::npos);
  EXPECT_NE(svg.find(">loss (log scale)</text>"), std::string::npos);
}

TEST(SvgChart, MissingValuesBreakTheLine) {
  // NaN and infinity split the line into two pieces.
  auto sp = subpaths(series_paths(render(chart_of({0, 1, 2, 3, 4, 5}, {1, 2, kNaN, 4, kInf, 5}))).at(0));
  ASSERT_EQ(sp.size(), 1u);  // {1, 2} is a line; {4} and {5} are single points, drawn as dots
  EXPECT_EQ(sp[0].size(), 2u);
  const std::string dots = render(chart_of({0, 1, 2, 3, 4, 5}, {1, 2, kNaN, 4, kInf, 5}));
  EXPECT_EQ(count(dots, "<circle"), 2u);

  sp = subpaths(series_paths(render(chart_of({0, 1, 2, 3, 4, 5}, {1, 2, kNaN, 4, 5, 6}))).at(0));
  ASSERT_EQ(sp.size(), 2u);
  EXPECT_EQ(sp[0].size(), 2u);
  EXPECT_EQ(sp[1].size(), 3u);

  // A NaN x is a gap too; on a log axis so are zero and negative values.
  sp = subpaths(series_paths(render(chart_of({0, 1, kNaN, 3, 4}, {1, 2, 3, 4, 5}))).at(0));
  EXPECT_EQ(sp.size(), 2u);
  const LineChart logc = chart_of({0, 1, 2, 3, 4, 5}, {1, 2, 0, -3, 4, 5}, true);
  sp = subpaths(series_paths(render(logc)).at(0));
  EXPECT_EQ(sp.size(), 2u);
  EXPECT_EQ(drawable_points(logc), 4u);
}

TEST(SvgChart, TextIsEscaped) {
  EXPECT_EQ(escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  LineChart c = chart_of({0, 1}, {0, 1});
  c.title = "</svg><script>alert(1)</script>";
  c.subtitle = "x & y";
  c.x.label = "<x>";
  c.series[0].label = "lr=\"3e-3\" & <post>";
  c.series[0].color = "\"><script>";
  const std::string svg = render(c);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  EXPECT_NE(svg.find("&lt;/svg&gt;&lt;script&gt;"), std::string::npos);
  EXPECT_NE(svg.find("lr=&quot;3e-3&quot; &amp; &lt;post&gt;"), std::string::npos);
  EXPECT_NE(svg.find("x &amp; y"), std::string::npos);
  EXPECT_NE(svg.find("&lt;x&gt;"), std::string::npos);
}

TEST(SvgChart, NoDataStillRenders) {
  LineChart empty;
  empty.title = "empty";
  for (const LineChart& c : {empty, chart_of({0, 1, 2}, {kNaN, kNaN, kInf}), chart_of({}, {}),
                             chart_of({0, 1}, {-1, 0}, true)}) {
    const std::string svg = render(c);
    EXPECT_EQ(drawable_points(c), 0u);
    EXPECT_TRUE(svg.starts_with("<svg ")) << svg.substr(0, 80);
    EXPECT_TRUE(svg.ends_with("</svg>\n"));
    EXPECT_NE(svg.find(">no data</text>"), std::string::npos);
    EXPECT_TRUE(series_paths(svg).empty());
    EXPECT_EQ(svg.find("nan"), std::string::npos);  // no NaN coordinates
    EXPECT_EQ(svg.find("inf"), std::string::npos);
  }
}

TEST(SvgChart, StandaloneAndInline) {
  const LineChart c = chart_of({0, 1}, {0, 1});
  const std::string inl = render(c), file = render(c, true);
  EXPECT_EQ(inl.find("http"), std::string::npos);  // no URL at all in the page
  EXPECT_TRUE(file.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\""));
}

TEST(SvgChart, MarksLegendAndDashes) {
  LineChart c = chart_of({1e-3, 3e-3}, {2.5, 2.2});
  c.x.log = true;
  c.series[0].markers = true;
  c.series[0].marks.push_back({1e-2, kNaN, "diverged"});  // pinned to the top edge
  Series val;
  val.label = "validation";
  val.x = {1e-3, 3e-3};
  val.y = {2.6, 2.3};
  val.dashed = true;
  val.in_legend = false;
  c.series.push_back(val);
  const std::string svg = render(c);
  EXPECT_EQ(count(svg, "class=\"mark\""), 1u);
  EXPECT_NE(svg.find("s: diverged"), std::string::npos);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 1u);  // the dashed series, not in the legend
  EXPECT_EQ(svg.find(">validation</text>"), std::string::npos);
  EXPECT_GE(count(svg, "<circle"), 2u);
  // The mark's x (1e-2) is inside the x domain although no line reaches it.
  EXPECT_NE(svg.find(">0.01</text>"), std::string::npos);
}

TEST(SvgChart, LongSeriesKeepTheirSpikes) {
  std::vector<double> x(100000), y(100000, 1.0);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i);
  y[51234] = 100;  // one spike
  const LineChart c = chart_of(x, y);
  const std::string svg = render(c);
  EXPECT_LT(svg.size(), 200000u);  // decimated to a few points per pixel
  const auto sp = subpaths(series_paths(svg).at(0));
  double top = 1e9, bottom = 0;
  for (const auto& [px, py] : sp.at(0)) {
    top = std::min(top, py);
    bottom = std::max(bottom, py);
  }
  EXPECT_GT(bottom - top, 200);  // the spike reaches far above the flat line
}

}  // namespace
}  // namespace normlab::svg
