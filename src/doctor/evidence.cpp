// What evidence each of doctor's checks has (docs/doctor.md, "Not checked and not judged"): a
// field counts on a step line when it holds a number (a per-layer array or per-site object: at
// least one). A check whose fields are on too few lines, or named by a `missing` event
// (docs/metrics.md), and which found nothing on what there was, is listed as not checked with
// the reason: the event's when there is one, else what is absent.
#include <fmt/format.h>

#include <algorithm>

#include "doctor/doctor_detail.h"
#include "normlab/metrics.h"

namespace normlab::doctor_detail {

namespace {

bool has_number(const json& v) {
  if (v.is_number()) return true;
  if (v.is_array() || v.is_object())
    return std::any_of(v.begin(), v.end(), [](const json& x) { return has_number(x); });
  return false;
}

// The `missing` event that names `field`, or none.
const json* missing_event(const Run& r, const std::string& field) {
  for (const json* e : r.missing) {
    const auto it = e->find("fields");
    if (it == e->end() || !it->is_array()) continue;
    for (const json& f : *it)
      if (f.is_string() && f.get<std::string>() == field) return e;
  }
  return nullptr;
}

}  // namespace

std::optional<NotChecked> missing_evidence(const Run& r, const std::string& check,
                                           const std::vector<std::string>& needs,
                                           long min_records) {
  for (const std::string& field : needs) {
    long with = 0, null = 0;
    for (const json* j : r.steps) {
      const auto it = j->find(field);
      if (it == j->end()) continue;
      if (has_number(*it)) ++with;
      else ++null;
    }
    const json* event = missing_event(r, field);
    if (with >= min_records && !event) continue;
    NotChecked n{check, needs, {}, event != nullptr || null > 0};
    if (event) {
      n.reason = event->value("reason", std::string());
      if (n.reason.empty())
        n.reason = fmt::format("{} missing from step {} on", field, event->value("step", 0L));
    } else if (with == 0) {
      n.reason = null > 0 ? fmt::format("{} is null on every record that has it", field)
                          : fmt::format("no record has {}", field);
    } else {
      n.reason = fmt::format("only {} record{} {} (the check needs {})", with,
                             with == 1 ? " has" : "s have", field, min_records);
    }
    return n;
  }
  return std::nullopt;
}

}  // namespace normlab::doctor_detail
