#include "model/params.h"

#include "normlab/errors.h"
#include "ops/ngpt.h"

namespace normlab {

std::string_view to_string(ParamGroup g) {
  switch (g) {
    case ParamGroup::embedding: return "embedding";
    case ParamGroup::attention: return "attention";
    case ParamGroup::mlp: return "mlp";
    case ParamGroup::norm: return "norm";
    case ParamGroup::head: return "head";
  }
  return "?";
}

std::string_view to_string(UnitNorm u) {
  switch (u) {
    case UnitNorm::none: return "none";
    case UnitNorm::rows: return "rows";
    case UnitNorm::cols: return "cols";
  }
  return "?";
}

template <class T>
int apply_unit_norms(const ParamTable& table, T* params) {
  int n = 0;
  for (const ParamSpec& s : table.specs()) {
    if (s.unit_norm == UnitNorm::none) continue;
    NL_CHECK(s.shape.size() == 2, "unit-norm parameter '{}' is not a matrix", s.name);
    T* w = params + s.offset;
    if (s.unit_norm == UnitNorm::rows)
      ops::normalize_rows(w, s.shape[0], s.shape[1]);
    else
      ops::normalize_cols(w, s.shape[0], s.shape[1]);
    ++n;
  }
  return n;
}
template int apply_unit_norms<float>(const ParamTable&, float*);
template int apply_unit_norms<double>(const ParamTable&, double*);

long ParamTable::add(ParamSpec spec) {
  NL_CHECK(!index_.count(spec.name), "parameter '{}' registered twice", spec.name);
  long n = 1;
  for (auto d : spec.shape) {
    NL_CHECK(d > 0, "parameter '{}' has a non-positive dimension", spec.name);
    n *= d;
  }
  spec.numel = n;
  // Keep every tensor 16-element aligned so kernels see aligned rows.
  spec.offset = (total_ + 15) / 16 * 16;
  total_ = spec.offset + n;
  index_.emplace(spec.name, specs_.size());
  specs_.push_back(std::move(spec));
  return specs_.back().offset;
}

const ParamSpec* ParamTable::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &specs_[it->second];
}

}  // namespace normlab
