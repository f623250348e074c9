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

std::string_view to_string(ParamRole r) {
  switch (r) {
    case ParamRole::other: return "other";
    case ParamRole::tok_emb: return "tok_emb";
    case ParamRole::pos_emb: return "pos_emb";
    case ParamRole::lm_head: return "lm_head";
    case ParamRole::attn_qkv: return "attn_qkv";
    case ParamRole::attn_out: return "attn_out";
    case ParamRole::attn_gate: return "attn_gate";
    case ParamRole::mlp_in: return "mlp_in";
    case ParamRole::mlp_out: return "mlp_out";
    case ParamRole::linear_bias: return "linear_bias";
    case ParamRole::attn_sink: return "attn_sink";
    case ParamRole::norm_gain: return "norm_gain";
    case ParamRole::norm_bias: return "norm_bias";
    case ParamRole::dyt_alpha: return "dyt_alpha";
    case ParamRole::norm_shift: return "norm_shift";
    case ParamRole::branch_scale: return "branch_scale";
    case ParamRole::shortcut_scale: return "shortcut_scale";
    case ParamRole::ngpt_alpha: return "ngpt_alpha";
    case ParamRole::ngpt_scale: return "ngpt_scale";
    case ParamRole::sigma_gamma: return "sigma_gamma";
    case ParamRole::sigma_u: return "sigma_u";
    case ParamRole::sigma_v: return "sigma_v";
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

const ParamSpec* ParamTable::find(std::string_view site, ParamRole role) const {
  for (const ParamSpec& s : specs_)
    if (s.role == role && s.site == site) return &s;
  return nullptr;
}

}  // namespace normlab
