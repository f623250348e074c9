#include "model/params.h"

#include "normlab/errors.h"

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
