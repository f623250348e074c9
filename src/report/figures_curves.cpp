// Curve extraction for the report's figures: series read out of metrics records (a metric of every
// step line, the last array of a diagnostics record), the moving average that smooths a training
// curve, and how a run ended.
#include <algorithm>
#include <cmath>
#include <optional>

#include "io/metrics.h"
#include "normlab/metrics.h"
#include "report/figures.h"
#include "report/figures_detail.h"

using nlohmann::json;

namespace normlab::report {

std::vector<double> ema(const std::vector<double>& y, double beta, const std::vector<bool>& use,
                        const std::vector<double>& x) {
  if (!(beta > 0)) return y;
  std::vector<double> out(y.size(), figures_detail::kNaN);
  double m = 0, weight = 0;  // weight: the total weight of the points averaged so far
  double x_prev = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (!std::isfinite(y[i])) continue;  // a gap stays a gap
    if (use.empty() || use[i]) {
      const double xi = x.empty() ? static_cast<double>(i) : x[i];
      const double b = weight > 0 ? std::pow(beta, xi - x_prev) : 0;  // beta per step between points
      m = b * m + y[i];
      weight = b * weight + 1;
      x_prev = xi;
    }
    if (weight > 0) out[i] = m / weight;
  }
  return out;
}

bool is_event(const json& record) { return record.contains(metric::event); }

const json* last_step_line(const RunInput& r) {
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it)
    if (!is_event(*it)) return &*it;
  return nullptr;
}

RunEnd run_end(const RunInput& r) {
  RunEnd e;
  const std::optional<normlab::RunEnd> end = run_end_of(r.metrics);
  if (!end) return e;
  e.from_event = end->from_event;
  e.step = static_cast<double>(end->step);
  e.reason = end->reason;
  e.detail = end->detail;
  if (end->train_loss) e.train_loss = *end->train_loss;
  if (end->val_loss) e.val_loss = *end->val_loss;
  // An end event without a validation loss (interrupted before the final evaluation): the last
  // evaluation logged on a step line.
  if (!std::isfinite(e.val_loss))
    for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it)
      if (!is_event(*it) && it->contains(metric::val_loss)) {
        e.val_loss = number_or_nan(*it, metric::val_loss);
        break;
      }
  return e;
}

namespace figures_detail {

double as_number(const json& v) { return v.is_number() ? v.get<double>() : kNaN; }

double finite_max(const json& v) {
  double m = kNaN;
  if (!v.is_array()) return as_number(v);
  for (const auto& e : v)
    if (e.is_number() && std::isfinite(e.get<double>()) && !(e.get<double>() <= m)) m = e.get<double>();
  return m;
}

Curve curve(const RunInput& r, const std::string& xkey, const char* key, const Reduce& reduce) {
  Curve c;
  for (const auto& rec : r.metrics) {
    const auto it = rec.find(key);
    if (it == rec.end() || is_event(rec)) continue;
    c.x.push_back(number_or_nan(rec, xkey.c_str()));
    c.y.push_back(reduce(*it));
    c.updated.push_back(!rec.value(metric::skipped, false));
  }
  return c;
}

bool any_finite(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

const json* last_with_array(const RunInput& r, const char* key) {
  for (auto it = r.metrics.rbegin(); it != r.metrics.rend(); ++it) {
    const auto f = it->find(key);
    if (f != it->end() && f->is_array() && !f->empty()) return &*it;
  }
  return nullptr;
}

std::vector<double> array_values(const json& a) {
  std::vector<double> out;
  for (const auto& e : a) out.push_back(as_number(e));
  return out;
}

}  // namespace figures_detail

}  // namespace normlab::report
