// The coordinate check (lab/coordcheck.h) as a chart and a table: `normlab coordcheck` writes them
// as coordcheck.svg and coordcheck.md, and `normlab report` shows them for every coordcheck.json
// among its inputs.
#pragma once
#include <string>

#include "lab/coordcheck.h"
#include "report/svg.h"

namespace normlab::report {

// Activation RMS against width at the last step: one color per activation, solid for μP, dashed
// for the standard parametrization, both axes logarithmic.
svg::LineChart coordcheck_chart(const CoordcheckResult& r);

// Writes dir/coordcheck.json (coordcheck_json), coordcheck.md (the table) and coordcheck.svg (the
// chart), creating dir; returns the JSON.
nlohmann::json write_coordcheck(const std::string& dir, const Config& base, const CoordcheckResult& r);

// The table of coordcheck_table (RMS per width at the last step, slopes) as HTML.
std::string coordcheck_table_html(const CoordcheckResult& r);

}  // namespace normlab::report
