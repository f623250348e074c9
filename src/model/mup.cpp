#include "model/mup.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/param_table.h"
#include "model/plan.h"
#include "normlab/errors.h"

namespace normlab {

namespace {

WidthShape width_shape(const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& base) {
  NL_CHECK(shape.size() == base.size(), "μP base shape of another rank");
  WidthShape w;
  const std::size_t n = shape.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (shape[i] == base[i]) continue;
    const double mult = static_cast<double>(shape[i]) / static_cast<double>(base[i]);
    ++w.ninf;
    if (n >= 2 && i == 1) w.fan_in_mult = mult;
    if (n >= 2 && i == 0) w.fan_out_mult = mult;
  }
  return w;
}

}  // namespace

std::string_view to_string(MupClass c) {
  switch (c) {
    case MupClass::fixed: return "fixed";
    case MupClass::vector_like: return "vector-like";
    case MupClass::hidden: return "matrix-like";
    case MupClass::readout: return "readout-like";
  }
  return "?";
}

MupClass mup_class(const ParamSpec& s) {
  if (s.width.ninf == 0) return MupClass::fixed;
  if (s.width.ninf >= 2) return MupClass::hidden;
  // One width dimension: readout-like when the tensor is a linear map (a hidden matrix by role,
  // or the LM head) whose fan-in is the width one; embeddings are lookups, not maps of the width.
  const bool linear_map = s.shape.size() == 2 && (s.hidden_matrix() || s.group == ParamGroup::head);
  if (linear_map && s.width.fan_in_mult != 1.0 && s.width.fan_out_mult == 1.0)
    return MupClass::readout;
  return MupClass::vector_like;
}

double readout_like_multiplier(const ParamSpec& s) {
  return mup_class(s) == MupClass::readout ? 1.0 / s.width.fan_in_mult : 1.0;
}

void apply_mup(ParamTable& table, const ModelConfig& cfg) {
  if (cfg.parametrization != Parametrization::mup) return;
  const ModelConfig base_cfg = mup_base_model(cfg);
  const ParamLayout base = build_param_table(base_cfg, build_plan(base_cfg));
  for (ParamSpec& s : table.specs_mut()) {
    const ParamSpec* b = base.table.find(s.name);
    NL_CHECK(b != nullptr, "μP base model lacks parameter {}", s.name);
    s.width = width_shape(s.shape, b->shape);
    if (s.width.ninf > 2)
      throw InputError("μP: a parameter with more than two width dimensions: " + s.name);
    // Xavier: the bound of the base shape (mup.init.xavier_uniform_), the draw of the base model.
    if (s.init == ParamInit::uniform && s.shape.size() == 2) s.init_scale = b->init_scale;
    if (s.width.ninf == 2 && s.init != ParamInit::constant)
      s.init_scale /= std::sqrt(s.width.fan_in_mult);
  }
}

double readout_multiplier(const ModelConfig& cfg) {
  if (cfg.parametrization != Parametrization::mup) return 1.0;
  return cfg.mup_output_mult * cfg.mup_base_width / static_cast<double>(cfg.d_model);
}

double attention_scale(const ModelConfig& cfg) {
  const double D = cfg.head_size();
  if (cfg.parametrization != Parametrization::mup)
    return cfg.attn_scale > 0 ? cfg.attn_scale : 1.0 / std::sqrt(D);
  const double D0 = mup_base_model(cfg).head_size();
  const double s0 = cfg.attn_scale > 0 ? cfg.attn_scale : 1.0 / std::sqrt(D0);
  return s0 * D0 / D;
}

std::vector<std::string> describe_mup(const ModelConfig& cfg, const ParamTable& table) {
  if (cfg.parametrization != Parametrization::mup) return {};
  const ModelConfig b = mup_base_model(cfg);
  std::set<double> fan_in, readout_in;
  int matrices = 0, vectors = 0;
  std::vector<std::string> readouts;
  for (const ParamSpec& s : table.specs()) {
    if (!s.trained) continue;  // buffers (σReparam's u, v)
    switch (mup_class(s)) {
      case MupClass::hidden: ++matrices, fan_in.insert(s.width.fan_in_mult); break;
      case MupClass::readout:
        readouts.push_back(s.name), readout_in.insert(s.width.fan_in_mult);
        break;
      case MupClass::vector_like: ++vectors; break;
      case MupClass::fixed: break;
    }
  }
  std::vector<std::string> out;
  out.push_back(fmt::format("parametrization mup: base model d_model {}, d_ff {}, {} heads of {} "
                            "(d_model x{:.4g})", b.d_model, b.d_ff, b.n_head, b.head_size(),
                            static_cast<double>(cfg.d_model) / b.d_model));
  out.push_back(fmt::format("  readout multiplier {:.4g}; attention scale {:.4g} (1/sqrt(head) = "
                            "{:.4g})", readout_multiplier(cfg), attention_scale(cfg),
                            1.0 / std::sqrt(static_cast<double>(cfg.head_size()))));
  if (matrices > 0)
    out.push_back(fmt::format("  {} matrix-like tensors (fan-in x{:.4g}): init / sqrt(fan-in x), "
                              "Adam-family lr / fan-in x, Muon lr x1 (match_rms_adamw / sqrt)",
                              matrices, fmt::join(fan_in, ", x")));
  if (!readouts.empty()) {
    std::string names = readouts.front();
    if (readouts.size() > 1) names += fmt::format(" and {} more", readouts.size() - 1);
    out.push_back(fmt::format("  {} readout-like tensors (fan-in x{:.4g}, fan-out fixed: {}): "
                              "output x mult / fan-in x (the head's mult mup_output_mult, the "
                              "others' 1), init and Adam-family lr as written, Muon lr x "
                              "sqrt(fan-in x) (match_rms_adamw x1)",
                              readouts.size(), fmt::join(readout_in, ", x"), names));
  }
  out.push_back(fmt::format("  {} vector-like tensors (one width dimension) keep their init and lr",
                            vectors));
  return out;
}

double adam_lr_multiplier(const ParamSpec& s) {
  return s.width.ninf == 2 ? 1.0 / s.width.fan_in_mult : 1.0;
}

double muon_lr_multiplier(const ParamSpec& s, MuonAdjustLr adjust) {
  if (mup_class(s) == MupClass::readout && s.hidden_matrix())
    return adjust == MuonAdjustLr::original ? std::sqrt(s.width.fan_in_mult) : 1.0;
  if (s.width.ninf != 2) return 1.0;
  return adjust == MuonAdjustLr::original ? 1.0 : 1.0 / std::sqrt(s.width.fan_in_mult);
}

}  // namespace normlab
