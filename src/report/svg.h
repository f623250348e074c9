// A small, dependency-free SVG chart library for the HTML report: line charts with several series
// on linear or logarithmic axes (with minor grid lines and labels between decades), "nice" tick
// values, a legend, a title and axis labels. Missing values (NaN, +-Inf, and non-positive values
// on a log axis) break a line into separate pieces instead of being drawn through; marks (a
// cross, its title the tooltip) flag points such as the step where a diverged run stopped.
//
// The output is plain SVG text: with `standalone` it is a complete .svg file, otherwise an element
// to inline in HTML (no namespace URI, so the page carries no URL at all). Nothing here reads files,
// prints or knows about runs; src/report/figures.cpp turns runs into charts.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normlab::svg {

struct Axis {
  std::string label;
  bool log = false;            // base-10 logarithmic scale
  bool integer = false;        // ticks only at whole numbers (layer indices)
  std::optional<double> min;   // fixed ends of the domain; by default derived from the data
  std::optional<double> max;
  std::vector<double> ticks;   // explicit tick values (those inside the domain are drawn); empty = automatic
};

// A flagged point drawn as a cross in the series' color; y = NaN pins it to the top edge of the
// plot (a run that diverged has no final value to place it at). `title` becomes its tooltip.
struct Mark {
  double x = 0, y = 0;
  std::string title;
};

struct Series {
  std::string label;
  std::vector<double> x, y;  // same length; a non-finite value in either breaks the line
  std::string color;         // CSS color; empty = from the palette by series index
  std::string dash;          // stroke-dasharray; empty with no color = dash_pattern(series index)
  bool dashed = false;       // dashed "6 4" (validation curves), whatever `dash` says
  double opacity = 1;        // of the line (raw curves under a smoothed one are faint)
  bool markers = false;      // a dot at every point (sparse data such as a learning-rate sweep)
  bool in_legend = true;
  std::vector<Mark> marks;
  // A filled band under the line (the min-max over seeds): same length as x, or empty for none; a
  // point where either end is not drawable breaks the band.
  std::vector<double> band_lo, band_hi;
};

struct LineChart {
  std::string id = "chart";  // unique within a page: prefixes the chart's element ids
  std::string title;
  std::string subtitle;      // one line of smaller text under the title (e.g. "dashed: validation")
  Axis x, y;
  std::vector<Series> series;
  int width = 960;           // the plot shrinks to leave room for the legend on the right
  int height = 380;          // grows when the legend needs more room
};

// The chart as SVG text. A chart with no drawable point renders its frame and "no data".
std::string render(const LineChart& chart, bool standalone = false);

// Number of points of `chart` that would be drawn (finite, and positive on log axes).
std::size_t drawable_points(const LineChart& chart);

// ---- building blocks, exposed for tests ----

// Escapes & < > " ' for text content and attribute values.
std::string escape(std::string_view text);

// The i-th color of a categorical palette: the eight colors of Okabe & Ito (2008), distinct for
// the common forms of color blindness, in an order that puts the most distinct first; cycles.
std::string palette(std::size_t i);
// The stroke pattern that keeps series of the same palette color apart: solid for the first eight
// series, dash-dot ("8 3 2 3") for the next eight, dotted ("2 3") for the eight after; cycles.
std::string dash_pattern(std::size_t i);

// Round numbers covering [lo, hi] with about `target` intervals (steps of 1, 2 or 5 x 10^k).
std::vector<double> nice_ticks(double lo, double hi, int target = 5);
// The step nice_ticks uses.
double nice_step(double lo, double hi, int target = 5);
// Ticks for a log axis over [lo, hi] (lo > 0): whole decades on wide ranges; within a few decades
// the set among 1-2-5, 1-2-3-5, 1..9 x 10^k and round linear values that leaves no long stretch of
// the axis unlabelled.
std::vector<double> log_ticks(double lo, double hi);
// The minor ticks of a log axis over [lo, hi]: m x 10^k for m = 2..9 inside the range and not in
// `major`, drawn as light grid lines when the axis spans at most six decades (empty otherwise).
std::vector<double> log_minor_ticks(double lo, double hi, const std::vector<double>& major);
// Those minor ticks worth a label: the 2s and 5s when every major tick is a power of ten and the
// axis spans at most four decades, so that values between decades can be read.
std::vector<double> log_minor_labels(double lo, double hi, const std::vector<double>& major);

// Short text for a number: 0.003 -> "3e-3", 1500 -> "1500", 2.5e6 -> "2.5e6", 0.25 -> "0.25".
std::string compact_number(double v);
// A tick label: fixed decimals matching `step` for ordinary magnitudes, compact_number otherwise.
std::string tick_label(double v, double step);

}  // namespace normlab::svg
