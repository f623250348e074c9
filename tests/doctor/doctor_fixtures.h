// What the doctor tests share: a finding by kind, and whether any line of a list contains a text.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "doctor/doctor.h"

namespace normlab::doctor_test {

inline const DoctorFinding* find(const Diagnosis& d, const std::string& kind) {
  for (const auto& f : d.findings)
    if (f.kind == kind) return &f;
  return nullptr;
}

inline bool any_contains(const std::vector<std::string>& v, const std::string& s) {
  return std::any_of(v.begin(), v.end(),
                     [&](const std::string& x) { return x.find(s) != std::string::npos; });
}

// Whether an advised (not tried) remedy's text contains `s`.
inline bool any_contains(const std::vector<Remedy>& v, const std::string& s) {
  return std::any_of(v.begin(), v.end(), [&](const Remedy& m) {
    return !m.tried && m.text.find(s) != std::string::npos;
  });
}

// The remedy that sets `key`, or none.
inline const Remedy* remedy_setting(const DoctorFinding& f, const std::string& key) {
  for (const Remedy& m : f.remedies)
    for (const auto& kv : m.set)
      if (kv.first == key) return &m;
  return nullptr;
}

}  // namespace normlab::doctor_test
