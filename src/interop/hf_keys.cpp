#include "interop/hf_keys.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include <fmt/format.h>

namespace normlab::hf {

const json* HfKeys::raw(const std::string& key) const {
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}
std::string HfKeys::show(const std::string& key) const {
  const json* v = raw(key);
  return fmt::format("{}{} = {}", where_, key, v ? v->dump() : "null");
}
void HfKeys::refuse(const std::string& key, const std::string& why) {
  problems_.push_back(fmt::format("{}: {}", show(key), why));
}
void HfKeys::refuse_value(const std::string& key, const std::string& value,
                          const std::string& why) {
  problems_.push_back(fmt::format("{}{} = {}: {}", where_, key, value, why));
}

long HfKeys::integer(const std::string& key, long def) {
  const json* v = raw(key);
  if (!v) return def;
  if (v->is_number_integer()) return v->get<long>();
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>())
    return static_cast<long>(v->get<double>());
  refuse(key, "expected an integer");
  return def;
}
std::optional<long> HfKeys::optional_integer(const std::string& key, std::optional<long> def) {
  if (is_null(key)) return std::nullopt;
  if (!present(key)) return def;
  return integer(key, 0);
}
double HfKeys::number(const std::string& key, double def) {
  const json* v = raw(key);
  if (!v) return def;
  if (v->is_number()) return v->get<double>();
  refuse(key, "expected a number");
  return def;
}
std::optional<double> HfKeys::optional_number(const std::string& key, std::optional<double> def) {
  if (is_null(key)) return std::nullopt;
  if (!present(key)) return def;
  return number(key, 0.0);
}
bool HfKeys::boolean(const std::string& key, bool def) {
  const json* v = raw(key);
  if (!v) return def;
  if (v->is_boolean()) return v->get<bool>();
  refuse(key, "expected true or false");
  return def;
}
std::string HfKeys::string(const std::string& key, const std::string& def) {
  const json* v = raw(key);
  if (!v) return def;
  if (v->is_string()) return v->get<std::string>();
  refuse(key, "expected a string");
  return def;
}

ActFormula act_formula(const std::string& a) {
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_python_tanh")
    return ActFormula::tanh_gelu;
  if (a == "gelu" || a == "gelu_python") return ActFormula::erf_gelu;
  if (a == "silu" || a == "swish") return ActFormula::silu;
  return ActFormula::other;
}

bool close(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

void note_dropout(HfKeys& k, const std::vector<std::pair<std::string, double>>& keys,
                  std::vector<std::string>& notes) {
  for (const auto& [key, def] : keys) {
    const double p = k.number(key, def);
    if (p != 0.0)
      notes.push_back(fmt::format("{}{} = {} ignored: normlab trains without dropout (HF applies "
                                  "it only in training mode)",
                                  k.where(), key, p));
  }
}

double read_rope_theta(HfKeys& k, const char* layer_type, const std::string& legacy_theta_key,
                       double default_theta) {
  const json* rp = k.raw("rope_parameters");
  const json* entry = nullptr;
  std::string path = "rope_parameters";
  if (rp && rp->is_object() && !rp->empty()) {
    const bool nested = rp->contains("full_attention") || rp->contains("sliding_attention");
    if (!nested) {
      entry = rp;
    } else if (layer_type && rp->contains(layer_type) && !rp->at(layer_type).is_null()) {
      entry = &rp->at(layer_type);
      path += std::string(".") + layer_type;
    }
  } else if (rp && !rp->is_object()) {
    k.refuse("rope_parameters", "expected an object");
  }
  if (entry) {
    if (!entry->is_object()) {
      k.refuse_value(path, entry->dump(), "expected an object");
      return default_theta;
    }
    std::string type = "default";
    if (entry->contains("rope_type") && entry->at("rope_type").is_string())
      type = entry->at("rope_type").get<std::string>();
    else if (entry->contains("type") && entry->at("type").is_string())
      type = entry->at("type").get<std::string>();
    if (type != "default")
      k.refuse_value(path + ".rope_type", json(type).dump(),
                     "scaled RoPE has no normlab counterpart (normlab: plain RoPE, one base)");
    const json* prf =
        entry->contains("partial_rotary_factor") ? &entry->at("partial_rotary_factor") : nullptr;
    if (prf && prf->is_number() && prf->get<double>() != 1.0)
      k.refuse_value(path + ".partial_rotary_factor", entry->at("partial_rotary_factor").dump(),
                     "normlab rotates every dimension of a head");
    if (entry->contains("rope_theta") && entry->at("rope_theta").is_number())
      return entry->at("rope_theta").get<double>();
    return k.number(legacy_theta_key, default_theta);
  }
  // Legacy keys (transformers 4): rope_scaling applies to the global (full attention) RoPE.
  const bool global = !layer_type || std::string_view(layer_type) != "sliding_attention";
  if (global) {
    if (const json* rs = k.raw("rope_scaling")) {
      std::string type;
      if (rs->is_object()) type = rs->value("rope_type", rs->value("type", std::string("?")));
      if (type != "default")
        k.refuse("rope_scaling", "scaled RoPE has no normlab counterpart (normlab: plain RoPE)");
    }
  }
  if (k.present("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    k.refuse("partial_rotary_factor", "normlab rotates every dimension of a head");
  return k.number(legacy_theta_key, default_theta);
}

}  // namespace normlab::hf
