// The min-max band of a series (seeds): one closed path per run of drawable points, along the top
// and back along the bottom, inside the y range; a series without a band draws none.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "report/svg.h"

namespace normlab::svg {
namespace {

std::size_t band_occurrences(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

LineChart band_chart(std::vector<double> lo, std::vector<double> hi) {
  LineChart c;
  Series s;
  s.label = "pre";
  s.x = {1, 2, 3, 4};
  s.y = {2.0, 1.8, 1.7, 1.6};
  s.band_lo = std::move(lo);
  s.band_hi = std::move(hi);
  c.series.push_back(s);
  return c;
}

TEST(SvgBand, ClosedPathPerPieceAndNoneWithoutBand) {
  const std::string one = render(band_chart({1.9, 1.7, 1.6, 1.5}, {2.1, 1.9, 1.8, 1.7}));
  EXPECT_EQ(band_occurrences(one, "class=\"band\""), 1u) << one;
  EXPECT_EQ(band_occurrences(one, " Z\""), 1u) << one;
  // A missing end at the third point splits the band into one piece of two points and a lone
  // point (not drawn as a band).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string split = render(band_chart({1.9, 1.7, nan, 1.5}, {2.1, 1.9, 1.8, 1.7}));
  EXPECT_EQ(band_occurrences(split, "class=\"band\""), 1u) << split;
  const std::string none = render(band_chart({}, {}));
  EXPECT_EQ(band_occurrences(none, "class=\"band\""), 0u) << none;
  // The band widens the y range: its top (2.1) lies inside the plot like the line's points.
  LineChart wide = band_chart({1.0, 1.0, 1.0, 1.0}, {5.0, 5.0, 5.0, 5.0});
  const std::string w = render(wide);
  EXPECT_NE(w.find(">5<"), std::string::npos) << w;  // a tick label at 5
}

}  // namespace
}  // namespace normlab::svg
