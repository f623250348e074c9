#include "report/svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include <fmt/format.h>

namespace normlab::svg {

namespace {

constexpr double kCharWidth = 6.3;  // average advance of an 11px sans-serif character
constexpr std::size_t kMaxLegendChars = 48;

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// Removes trailing zeros (and a trailing point) from a fixed-point number.
std::string trim_zeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

// The data domain of one axis and its ticks.
struct Scale {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  std::vector<double> minor, minor_labels;  // log axes: light grid lines, and the labelled ones
  double step = 1;  // linear tick step (for labels)
  double a = 0, b = 1;  // pixel range

  double f(double v) const { return log ? std::log10(v) : v; }
  double px(double v) const { return a + (f(v) - f(lo)) / (f(hi) - f(lo)) * (b - a); }
  std::string label(double v) const { return log ? compact_number(v) : tick_label(v, step); }
};

Scale make_scale(const Axis& axis, std::vector<double> values) {
  Scale s;
  s.log = axis.log;
  std::erase_if(values, [&](double v) { return !drawable(v, axis.log); });
  double lo = values.empty() ? (axis.log ? 1.0 : 0.0) : *std::min_element(values.begin(), values.end());
  double hi = values.empty() ? (axis.log ? 10.0 : 1.0) : *std::max_element(values.begin(), values.end());
  if (axis.min && drawable(*axis.min, axis.log)) lo = *axis.min;
  if (axis.max && drawable(*axis.max, axis.log)) hi = *axis.max;
  if (hi < lo) std::swap(lo, hi);
  if (axis.log) {
    if (hi / lo < 1 + 1e-9) {
      lo /= 2;
      hi *= 2;
    } else {
      const double pad = 0.04 * (std::log10(hi) - std::log10(lo));
      if (!axis.min) lo /= std::pow(10.0, pad);
      if (!axis.max) hi *= std::pow(10.0, pad);
    }
    s.lo = lo;
    s.hi = hi;
    s.ticks = log_ticks(lo, hi);
    if (!axis.ticks.empty()) s.ticks = axis.ticks;
    std::erase_if(s.ticks, [&](double t) { return !(t >= lo * (1 - 1e-9) && t <= hi * (1 + 1e-9)); });
    s.minor = log_minor_ticks(lo, hi, s.ticks);
    s.minor_labels = log_minor_labels(lo, hi, s.ticks);
    if (!axis.ticks.empty() && s.minor_labels.empty()) {
      // Explicit ticks that are not all decades (swept learning rates such as 1e-3, 0.3): label the
      // decades between them too, where they do not crowd a tick.
      const int e0 = static_cast<int>(std::ceil(std::log10(lo) - 1e-9));
      const int e1 = static_cast<int>(std::floor(std::log10(hi) + 1e-9));
      for (int e = e0; e <= e1; ++e) {
        const double t = e >= 0 ? std::pow(10.0, e) : 1 / std::pow(10.0, -e);
        if (std::none_of(s.ticks.begin(), s.ticks.end(),
                         [&](double m) { return std::fabs(std::log10(m / t)) < 0.15; }))
          s.minor_labels.push_back(t);
      }
    }
    return s;
  }
  if (hi - lo <= std::max(std::fabs(hi), std::fabs(lo)) * 1e-12) {
    const double d = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    lo -= d;
    hi += d;
  }
  double step = nice_step(lo, hi, 5);
  if (axis.integer) step = std::max(1.0, std::round(step));
  if (!axis.min) lo = std::floor(lo / step + 1e-9) * step;
  if (!axis.max) hi = std::ceil(hi / step - 1e-9) * step;
  s.lo = lo;
  s.hi = hi;
  s.step = step;
  const double k0 = std::ceil(lo / step - 1e-9);
  for (double k = k0;; k += 1) {
    const double v = k * step;
    if (v > hi + step * 1e-9) break;
    s.ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  if (!axis.ticks.empty()) {
    s.ticks = axis.ticks;
    std::erase_if(s.ticks, [&](double t) { return !(t >= lo - step * 1e-9 && t <= hi + step * 1e-9); });
  }
  return s;
}

std::string fixed(double v) { return fmt::format("{:.2f}", v); }

// Reduces a run of points to at most four per pixel column (first, min, max, last, in their
// order), so that long curves stay small without hiding a spike.
std::vector<std::pair<double, double>> decimate(const std::vector<std::pair<double, double>>& pts) {
  if (pts.size() < 2000) return pts;
  std::vector<std::pair<double, double>> out;
  std::size_t i = 0;
  while (i < pts.size()) {
    const long col = std::lround(pts[i].first);
    std::size_t j = i, imin = i, imax = i;
    while (j < pts.size() && std::lround(pts[j].first) == col) {
      if (pts[j].second < pts[imin].second) imin = j;
      if (pts[j].second > pts[imax].second) imax = j;
      ++j;
    }
    std::array<std::size_t, 4> keep = {i, imin, imax, j - 1};
    std::sort(keep.begin(), keep.end());
    for (std::size_t k = 0; k < keep.size(); ++k)
      if (k == 0 || keep[k] != keep[k - 1]) out.push_back(pts[keep[k]]);
    i = j;
  }
  return out;
}

std::string truncate_label(const std::string& s) {
  if (s.size() <= kMaxLegendChars) return s;
  std::size_t n = kMaxLegendChars - 1;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // keep UTF-8 whole
  return s.substr(0, n) + "\u2026";
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string palette(std::size_t i) {
  // Okabe & Ito, "Color Universal Design" (2008): blue, vermillion, bluish green, reddish purple,
  // orange, sky blue, black, yellow (the yellow last: the faintest on white).
  static const char* const kColors[] = {"#0072b2", "#d55e00", "#009e73", "#cc79a7",
                                        "#e69f00", "#56b4e9", "#000000", "#f0e442"};
  return kColors[i % std::size(kColors)];
}

std::string dash_pattern(std::size_t i) {
  static const char* const kDashes[] = {"", "8 3 2 3", "2 3"};
  return kDashes[(i / 8) % std::size(kDashes)];
}

double nice_step(double lo, double hi, int target) {
  double range = hi - lo;
  if (!(range > 0) || !std::isfinite(range)) range = std::fabs(lo) > 0 ? std::fabs(lo) : 1.0;
  const double raw = range / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  const double nice = r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10;
  return nice * mag;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  std::vector<double> out;
  if (!std::isfinite(lo) || !std::isfinite(hi)) return out;
  if (hi < lo) std::swap(lo, hi);
  const double step = nice_step(lo, hi, target);
  for (double k = std::ceil(lo / step - 1e-9);; k += 1) {
    const double v = k * step;
    if (v > hi + step * 1e-9) break;
    out.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return out;
}

std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> out;
  if (!(lo > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  if (hi < lo) std::swap(lo, hi);
  const double a = std::log10(lo), b = std::log10(hi), d = b - a;
  const auto within = [&](double v) { return v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9); };
  const auto with_mantissas = [&](std::initializer_list<int> ms) {
    std::vector<double> t;
    for (int e = static_cast<int>(std::floor(a)); e <= static_cast<int>(std::ceil(b)); ++e)
      for (int m : ms) {
        // m * 10^e, computed so that 0.001 prints as 0.001 and not 0.0010000000000000002
        const double v = e >= 0 ? m * std::pow(10.0, e) : m / std::pow(10.0, -e);
        if (within(v)) t.push_back(v);
      }
    return t;
  };
  if (d >= 2.5) {
    const int k = std::max(1, static_cast<int>(std::ceil(d / 8)));
    for (int e = static_cast<int>(std::ceil(a - 1e-9)); e <= static_cast<int>(std::floor(b + 1e-9)); ++e)
      if (((e % k) + k) % k == 0) out.push_back(e >= 0 ? std::pow(10.0, e) : 1 / std::pow(10.0, -e));
    return out;
  }
  // Within a few decades: of several candidate sets, the one that leaves the smallest empty stretch
  // of axis (in log units, ends included), with 3 to 9 ticks not crowded together.
  std::vector<std::vector<double>> candidates = {with_mantissas({1, 2, 5}), with_mantissas({1, 2, 3, 5}),
                                                 with_mantissas({1, 2, 3, 4, 5, 6, 7, 8, 9}),
                                                 nice_ticks(lo, hi, 4), nice_ticks(lo, hi, 6)};
  double best_gap = INFINITY;
  for (auto& t : candidates) {
    std::erase_if(t, [&](double v) { return !(v > 0) || !within(v); });
    if (t.size() < 3 || t.size() > 9) continue;
    double max_gap = std::max(std::log10(t.front()) - a, b - std::log10(t.back()));
    double min_gap = INFINITY;
    for (std::size_t i = 1; i < t.size(); ++i) {
      const double g = std::log10(t[i]) - std::log10(t[i - 1]);
      max_gap = std::max(max_gap, g);
      min_gap = std::min(min_gap, g);
    }
    if (min_gap < 0.07 * d) continue;
    const bool tie = std::fabs(max_gap - best_gap) <= 1e-3 * d;
    if (max_gap < best_gap - 1e-3 * d || (tie && t.size() > out.size() && t.size() <= 6)) {
      best_gap = max_gap;
      out = t;
    }
  }
  if (out.empty()) out = {lo, hi};  // a sliver of a decade: label its ends
  return out;
}

std::vector<double> log_minor_ticks(double lo, double hi, const std::vector<double>& major) {
  std::vector<double> out;
  if (!(lo > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  if (hi < lo) std::swap(lo, hi);
  const double a = std::log10(lo), b = std::log10(hi);
  if (b - a > 6) return out;
  const auto near = [](double x, double y) { return std::fabs(x - y) <= 1e-9 * std::fabs(y); };
  for (int e = static_cast<int>(std::floor(a)); e <= static_cast<int>(std::ceil(b)); ++e)
    for (int m = 2; m <= 9; ++m) {
      const double v = e >= 0 ? m * std::pow(10.0, e) : m / std::pow(10.0, -e);
      if (v < lo * (1 - 1e-9) || v > hi * (1 + 1e-9)) continue;
      if (std::none_of(major.begin(), major.end(), [&](double t) { return near(t, v); })) out.push_back(v);
    }
  return out;
}

std::vector<double> log_minor_labels(double lo, double hi, const std::vector<double>& major) {
  std::vector<double> out;
  if (!(lo > 0) || !std::isfinite(lo) || !std::isfinite(hi) || major.empty()) return out;
  if (std::fabs(std::log10(hi) - std::log10(lo)) > 4) return out;
  for (double t : major) {
    const double e = std::log10(t);
    if (std::fabs(e - std::round(e)) > 1e-9) return out;  // labels between decades already
  }
  for (double v : log_minor_ticks(lo, hi, major)) {
    const double m = v / std::pow(10.0, std::floor(std::log10(v) + 1e-9));
    if (std::fabs(m - 2) < 1e-6 || std::fabs(m - 5) < 1e-6) out.push_back(v);
  }
  return out;
}

std::string compact_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1 && a < 1e5) {
    const int before = static_cast<int>(std::floor(std::log10(a))) + 1;
    return trim_zeros(fmt::format("{:.{}f}", v, std::max(0, 4 - before)));
  }
  if (a >= 0.01 && a < 1) return fmt::format("{:.3g}", v);
  std::string s = fmt::format("{:.2e}", v);  // "-2.50e-03"
  const auto e = s.find('e');
  const std::string mant = trim_zeros(s.substr(0, e));
  const int exp = std::stoi(s.substr(e + 1));
  return fmt::format("{}e{}", mant, exp);
}

std::string tick_label(double v, double step) {
  if (!std::isfinite(v)) return compact_number(v);
  if (std::fabs(v) < std::fabs(step) * 1e-6) return "0";
  if (!(step >= 1e-3 && step < 1e5)) return compact_number(v);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", v, decimals);
}

std::size_t drawable_points(const LineChart& chart) {
  std::size_t n = 0;
  for (const auto& s : chart.series)
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i)
      n += drawable(s.x[i], chart.x.log) && drawable(s.y[i], chart.y.log);
  return n;
}

namespace {

// Where everything goes: the scales with their pixel ranges, the plot rectangle and the legend.
struct Layout {
  Scale sx, sy;
  std::vector<const Series*> legend;  // the series listed in the legend, in order
  double left = 0, top = 0, width = 0, height = 0;
  double pw = 0, ph = 0;  // plot width and height
};

// The scales over every drawable point and every mark of the chart (pixel ranges not yet set).
std::pair<Scale, Scale> chart_scales(const LineChart& c) {
  std::vector<double> xs, ys;
  for (const auto& s : c.series) {
    const std::size_t n = std::min(s.x.size(), s.y.size());
    for (std::size_t i = 0; i < n; ++i)
      if (drawable(s.x[i], c.x.log) && drawable(s.y[i], c.y.log)) {
        xs.push_back(s.x[i]);
        ys.push_back(s.y[i]);
      }
    for (const auto& m : s.marks) {
      xs.push_back(m.x);
      ys.push_back(m.y);  // a NaN (pinned to the top) is dropped by make_scale
    }
    const std::size_t nb = std::min({s.x.size(), s.band_lo.size(), s.band_hi.size()});
    for (std::size_t i = 0; i < nb; ++i)
      if (drawable(s.x[i], c.x.log) && drawable(s.band_lo[i], c.y.log) && drawable(s.band_hi[i], c.y.log)) {
        ys.push_back(s.band_lo[i]);
        ys.push_back(s.band_hi[i]);
      }
  }
  return {make_scale(c.x, xs), make_scale(c.y, ys)};
}

Layout layout_chart(const LineChart& c) {
  Layout l;
  std::tie(l.sx, l.sy) = chart_scales(c);
  std::size_t legend_chars = 0;
  for (const auto& s : c.series)
    if (s.in_legend && !s.label.empty()) {
      l.legend.push_back(&s);
      legend_chars = std::max(legend_chars, std::min(s.label.size(), kMaxLegendChars));
    }
  std::size_t ytick_chars = 1;
  for (double t : l.sy.ticks) ytick_chars = std::max(ytick_chars, l.sy.label(t).size());
  for (double t : l.sy.minor_labels) ytick_chars = std::max(ytick_chars, l.sy.label(t).size());
  const double legend_w = l.legend.empty() ? 0 : 40 + legend_chars * kCharWidth;
  l.left = 30 + ytick_chars * kCharWidth + 8;
  l.top = c.subtitle.empty() ? 38 : 54;
  const double bottom = 48;
  const double right = 16 + legend_w;
  const double legend_h = 12 + 17.0 * l.legend.size();
  l.width = std::max<double>(c.width, l.left + right + 160);
  l.height = std::max<double>(c.height, l.top + bottom + std::max(legend_h, 140.0));
  l.pw = l.width - l.left - right;
  l.ph = l.height - l.top - bottom;
  l.sx.a = l.left;
  l.sx.b = l.left + l.pw;
  l.sy.a = l.top + l.ph;
  l.sy.b = l.top;
  return l;
}

// The opening <svg> element, background, title and subtitle.
std::string render_head(const LineChart& c, const Layout& l, bool standalone, std::size_t npts) {
  std::string o;
  if (standalone) o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format(
      "<svg {}class=\"chart\" id=\"{}\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif\" "
      "font-size=\"11\" role=\"img\" aria-label=\"{}\" data-points=\"{}\">\n",
      standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "", escape(c.id), l.width, l.height, l.width,
      l.height, escape(c.title), npts);
  o += fmt::format("<title>{}</title>\n", escape(c.title));
  o += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", l.width, l.height);
  o += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\" font-weight=\"600\" fill=\"#222\">{}</text>\n",
                   fixed(l.left), escape(c.title));
  if (!c.subtitle.empty())
    o += fmt::format("<text x=\"{}\" y=\"39\" fill=\"#666\">{}</text>\n", fixed(l.left), escape(c.subtitle));
  return o;
}

// Grid lines at the ticks and the plot frame.
std::string render_grid(const Layout& l) {
  const double left = l.left, top = l.top, pw = l.pw, ph = l.ph;
  // One line per tick of each axis, across the plot.
  const auto lines = [&](const std::vector<double>& xs, const std::vector<double>& ys) {
    std::string g;
    for (double t : xs)
      g += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", fixed(l.sx.px(t)), fixed(top),
                       fixed(top + ph));
    for (double t : ys)
      g += fmt::format("<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\"/>\n", fixed(l.sy.px(t)), fixed(left),
                       fixed(left + pw));
    return g;
  };
  std::string o;
  if (!l.sx.minor.empty() || !l.sy.minor.empty())
    o += "<g class=\"grid minor\" stroke=\"#f2f2f2\" stroke-width=\"1\">\n" + lines(l.sx.minor, l.sy.minor) + "</g>\n";
  o += "<g class=\"grid\" stroke=\"#e0e0e0\" stroke-width=\"1\">\n" + lines(l.sx.ticks, l.sy.ticks) + "</g>\n";
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#9a9a9a\"/>\n",
                   fixed(left), fixed(top), fixed(pw), fixed(ph));
  return o;
}

// Tick marks, tick labels and the axis labels.
std::string render_axes(const LineChart& c, const Layout& l) {
  const double left = l.left, top = l.top, pw = l.pw, ph = l.ph;
  std::string o = "<g class=\"axis x\" fill=\"#444\" text-anchor=\"middle\">\n";
  for (double t : l.sx.ticks) {
    const double x = l.sx.px(t);
    o += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#9a9a9a\"/>", fixed(x),
                     fixed(top + ph), fixed(top + ph + 4));
    o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", fixed(x), fixed(top + ph + 16),
                     escape(l.sx.label(t)));
  }
  for (double t : l.sx.minor_labels)
    o += fmt::format("<text class=\"minor\" x=\"{}\" y=\"{}\" font-size=\"9\" fill=\"#888\">{}</text>\n",
                     fixed(l.sx.px(t)), fixed(top + ph + 15), escape(l.sx.label(t)));
  if (!c.x.label.empty())
    o += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#222\">{}</text>\n", fixed(left + pw / 2),
                     fixed(top + ph + 36), escape(c.x.label + (c.x.log ? " (log scale)" : "")));
  o += "</g>\n<g class=\"axis y\" fill=\"#444\" text-anchor=\"end\">\n";
  for (double t : l.sy.ticks) {
    const double y = l.sy.px(t);
    o += fmt::format("<line x1=\"{1}\" y1=\"{0}\" x2=\"{2}\" y2=\"{0}\" stroke=\"#9a9a9a\"/>", fixed(y),
                     fixed(left - 4), fixed(left));
    o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", fixed(left - 7), fixed(y + 4),
                     escape(l.sy.label(t)));
  }
  for (double t : l.sy.minor_labels)
    o += fmt::format("<text class=\"minor\" x=\"{}\" y=\"{}\" font-size=\"9\" fill=\"#888\">{}</text>\n",
                     fixed(left - 7), fixed(l.sy.px(t) + 3), escape(l.sy.label(t)));
  if (!c.y.label.empty())
    o += fmt::format(
        "<text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\" fill=\"#222\">{}</text>\n",
        fixed(top + ph / 2), escape(c.y.label + (c.y.log ? " (log scale)" : "")));
  o += "</g>\n";
  return o;
}

// The series' stroke-dasharray: dashed for validation curves, else its own pattern, else (no color
// of its own) the palette's pattern for its index.
std::string stroke_dash(const Series& s, std::size_t si) {
  if (s.dashed) return "6 4";
  if (!s.dash.empty() || !s.color.empty()) return s.dash;
  return dash_pattern(si);
}

// The series split into runs of drawable points, in pixels; a non-drawable point starts a new run.
std::vector<std::vector<std::pair<double, double>>> pixel_pieces(const LineChart& c, const Layout& l,
                                                                  const Series& s) {
  std::vector<std::vector<std::pair<double, double>>> pieces(1);
  const std::size_t n = std::min(s.x.size(), s.y.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (drawable(s.x[i], c.x.log) && drawable(s.y[i], c.y.log)) {
      pieces.back().emplace_back(l.sx.px(s.x[i]), l.sy.px(s.y[i]));
    } else if (!pieces.back().empty()) {
      pieces.emplace_back();
    }
  }
  return pieces;
}

// The crosses of a series' marks; a mark without a drawable y sits at the top edge.
std::string render_marks(const LineChart& c, const Layout& l, const Series& s,
                         const std::string& color) {
  std::string o;
  for (const auto& m : s.marks) {
    if (!drawable(m.x, c.x.log)) continue;
    const double x = l.sx.px(m.x);
    const double y = drawable(m.y, c.y.log) ? l.sy.px(m.y) : l.top + 7;
    o += fmt::format(
        "<path class=\"mark\" d=\"M{0} {1} L{2} {3} M{0} {3} L{2} {1}\" stroke=\"{4}\" stroke-width=\"2.4\" "
        "stroke-linecap=\"round\"><title>{5}</title></path>\n",
        fixed(x - 5), fixed(y - 5), fixed(x + 5), fixed(y + 5), escape(color),
        escape(m.title.empty() ? s.label : s.label + ": " + m.title));
  }
  return o;
}

// A series' band: one closed path per run of points whose x and both ends are drawable (along the
// top forward, back along the bottom), filled faintly in the series' color.
std::string render_band(const LineChart& c, const Layout& l, const Series& s, const std::string& color) {
  const std::size_t n = std::min({s.x.size(), s.band_lo.size(), s.band_hi.size()});
  std::vector<std::vector<std::size_t>> pieces(1);
  for (std::size_t i = 0; i < n; ++i) {
    if (drawable(s.x[i], c.x.log) && drawable(s.band_lo[i], c.y.log) && drawable(s.band_hi[i], c.y.log))
      pieces.back().push_back(i);
    else if (!pieces.back().empty())
      pieces.emplace_back();
  }
  std::string d;
  for (const auto& p : pieces) {
    if (p.size() < 2) continue;
    for (std::size_t j = 0; j < p.size(); ++j)
      d += fmt::format("{}{} {}", j == 0 ? (d.empty() ? "M" : " M") : " L", fixed(l.sx.px(s.x[p[j]])),
                       fixed(l.sy.px(s.band_hi[p[j]])));
    for (std::size_t j = p.size(); j-- > 0;)
      d += fmt::format(" L{} {}", fixed(l.sx.px(s.x[p[j]])), fixed(l.sy.px(s.band_lo[p[j]])));
    d += " Z";
  }
  if (d.empty()) return "";
  return fmt::format("<path class=\"band\" d=\"{}\" fill=\"{}\" fill-opacity=\"0.18\" stroke=\"none\">"
                     "<title>{} (min\u2013max over seeds)</title></path>\n",
                     d, escape(color), escape(s.label));
}

// One series: its band, its line (one sub-path per run of drawable points), dots (lone points,
// or every point with `markers`) and marks.
std::string render_series(const LineChart& c, const Layout& l, std::size_t si) {
  const Series& s = c.series[si];
  const std::string color = s.color.empty() ? palette(si) : s.color;
  const std::string dash = stroke_dash(s, si);
  std::string o = fmt::format("<g class=\"series\" data-label=\"{}\">\n", escape(s.label));
  o += render_band(c, l, s, color);
  const auto pieces = pixel_pieces(c, l, s);
  std::string d;
  std::vector<std::pair<double, double>> dots;
  for (const auto& p : pieces) {
    if (p.size() == 1) dots.push_back(p[0]);
    if (p.size() < 2) continue;
    const auto q = decimate(p);
    for (std::size_t i = 0; i < q.size(); ++i)
      d += fmt::format("{}{} {}", i == 0 ? (d.empty() ? "M" : " M") : " L", fixed(q[i].first),
                       fixed(q[i].second));
  }
  if (!d.empty())
    o += fmt::format(
        "<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" stroke-linejoin=\"round\" "
        "stroke-linecap=\"round\"{}{}><title>{}</title></path>\n",
        d, escape(color), dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", escape(dash)),
        s.opacity < 1 ? fmt::format(" stroke-opacity=\"{}\"", fixed(s.opacity)) : "", escape(s.label));
  if (s.markers)
    for (const auto& p : pieces)
      for (const auto& q : p) dots.push_back(q);
  for (const auto& [x, y] : dots)
    o += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"{}><title>{}</title></circle>\n", fixed(x),
                     fixed(y), escape(color),
                     s.opacity < 1 ? fmt::format(" fill-opacity=\"{}\"", fixed(s.opacity)) : "", escape(s.label));
  o += render_marks(c, l, s, color);
  o += "</g>\n";
  return o;
}

// Every series inside the plot's clip rectangle, and "no data" when nothing is drawn.
std::string render_plot(const LineChart& c, const Layout& l, std::size_t npts) {
  const std::string clip = c.id + "-clip";
  std::string o = fmt::format(
      "<clipPath id=\"{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath>\n", escape(clip),
      fixed(l.left - 4), fixed(l.top - 4), fixed(l.pw + 8), fixed(l.ph + 8));
  o += fmt::format("<g clip-path=\"url(#{})\">\n", escape(clip));
  for (std::size_t si = 0; si < c.series.size(); ++si) o += render_series(c, l, si);
  o += "</g>\n";
  bool any_mark = false;
  for (const auto& s : c.series) any_mark = any_mark || !s.marks.empty();
  if (npts == 0 && !any_mark)
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\" fill=\"#888\">no data</text>\n",
                     fixed(l.left + l.pw / 2), fixed(l.top + l.ph / 2));
  return o;
}

// The legend to the right of the plot; empty when no series is listed.
std::string render_legend(const LineChart& c, const Layout& l) {
  if (l.legend.empty()) return "";
  const double lx = l.left + l.pw + 14;
  std::string o = "<g class=\"legend\" fill=\"#222\">\n";
  for (std::size_t i = 0; i < l.legend.size(); ++i) {
    const Series& s = *l.legend[i];
    const std::size_t si = static_cast<std::size_t>(&s - c.series.data());
    const std::string color = s.color.empty() ? palette(si) : s.color;
    const std::string dash = stroke_dash(s, si);
    const double y = l.top + 10 + 17.0 * i;
    o += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2.2\"{}/>",
                     fixed(lx), fixed(y), fixed(lx + 22), fixed(y), escape(color),
                     dash.empty() ? "" : fmt::format(" stroke-dasharray=\"{}\"", escape(dash)));
    if (s.markers)
      o += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>", fixed(lx + 11), fixed(y), escape(color));
    o += fmt::format("<text x=\"{}\" y=\"{}\"><title>{}</title>{}</text>\n", fixed(lx + 28), fixed(y + 4),
                     escape(s.label), escape(truncate_label(s.label)));
  }
  o += "</g>\n";
  return o;
}

}  // namespace

std::string render(const LineChart& c, bool standalone) {
  const Layout l = layout_chart(c);
  const std::size_t npts = drawable_points(c);
  return render_head(c, l, standalone, npts) + render_grid(l) + render_axes(c, l) +
         render_plot(c, l, npts) + render_legend(c, l) + "</svg>\n";
}

}  // namespace normlab::svg
