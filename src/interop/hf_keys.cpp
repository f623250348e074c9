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

namespace {
// The RoPE of a rope_parameters entry or legacy rope_scaling object `e` (at `path`), base `theta`.
RopeSpec rope_of(HfKeys& k, const json& e, const std::string& path, double theta, long max_pos) {
  RopeSpec r;
  r.theta = theta;
  std::string type = "default";
  if (e.contains("rope_type") && e.at("rope_type").is_string())
    type = e.at("rope_type").get<std::string>();
  else if (e.contains("type") && e.at("type").is_string())
    type = e.at("type").get<std::string>();
  auto num = [&](const char* key) -> std::optional<double> {
    if (e.contains(key) && e.at(key).is_number()) return e.at(key).get<double>();
    k.refuse_value(path + "." + key, e.contains(key) ? e.at(key).dump() : "absent",
                   fmt::format("rope_type \"{}\" needs a number", type));
    return std::nullopt;
  };
  if (type == "linear") {
    r.type = RopeScaling::linear;
    if (auto f = num("factor")) r.factor = *f;
  } else if (type == "llama3") {
    r.type = RopeScaling::llama3;
    const auto f = num("factor"), lo = num("low_freq_factor"), hi = num("high_freq_factor");
    if (f) r.factor = *f;
    if (lo) r.low_freq_factor = *lo;
    if (hi) r.high_freq_factor = *hi;
    // As transformers' standardize_rope_params: a top-level original_max_position_embeddings
    // first, then the entry's, then max_position_embeddings.
    const char* orig_key = "original_max_position_embeddings";
    if (k.present(orig_key))
      r.original_seq_len = k.integer(orig_key, max_pos);
    else if (e.contains(orig_key) && e.at(orig_key).is_number_integer())
      r.original_seq_len = e.at(orig_key).get<long>();
    else if (e.contains(orig_key))
      k.refuse_value(path + "." + orig_key, e.at(orig_key).dump(), "expected an integer");
    else
      r.original_seq_len = max_pos;
  } else if (type != "default") {
    k.refuse_value(path + ".rope_type", json(type).dump(),
                   "normlab's RoPE scalings are linear and llama3 (dynamic, yarn, longrope, "
                   "proportional: no counterpart)");
  }
  const json* prf = e.contains("partial_rotary_factor") ? &e.at("partial_rotary_factor") : nullptr;
  if (prf && prf->is_number() && prf->get<double>() != 1.0)
    k.refuse_value(path + ".partial_rotary_factor", prf->dump(),
                   "normlab rotates every dimension of a head");
  return r;
}
}  // namespace

RopeSpec read_rope(HfKeys& k, const char* layer_type, const std::string& legacy_theta_key,
                   double default_theta, long max_pos) {
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
      return RopeSpec{.theta = default_theta};
    }
    const double theta = entry->contains("rope_theta") && entry->at("rope_theta").is_number()
                             ? entry->at("rope_theta").get<double>()
                             : k.number(legacy_theta_key, default_theta);
    return rope_of(k, *entry, path, theta, max_pos);
  }
  // Legacy keys (transformers 4): rope_scaling applies to the global (full attention) RoPE.
  const double theta = k.number(legacy_theta_key, default_theta);
  RopeSpec r{.theta = theta};
  const bool global = !layer_type || std::string_view(layer_type) != "sliding_attention";
  if (const json* rs = k.raw("rope_scaling"); rs && global) {
    if (rs->is_object())
      r = rope_of(k, *rs, "rope_scaling", theta, max_pos);
    else
      k.refuse("rope_scaling", "expected an object");
  }
  if (k.present("partial_rotary_factor") && k.number("partial_rotary_factor", 1.0) != 1.0)
    k.refuse("partial_rotary_factor", "normlab rotates every dimension of a head");
  return r;
}

void set_rope(ModelConfig& m, const RopeSpec& r) {
  m.rope_theta = r.theta;
  m.rope_scaling = r.type;
  if (r.type != RopeScaling::none) m.rope_factor = r.factor;
  if (r.type == RopeScaling::llama3) {
    m.rope_low_freq_factor = r.low_freq_factor;
    m.rope_high_freq_factor = r.high_freq_factor;
    m.rope_original_seq_len = static_cast<int>(r.original_seq_len);
  }
}

json rope_entry(const ModelConfig& m) {
  json e = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
  if (m.rope_scaling == RopeScaling::linear) {
    e["rope_type"] = "linear";
    e["factor"] = m.rope_factor;
  } else if (m.rope_scaling == RopeScaling::llama3) {
    e["rope_type"] = "llama3";
    e["factor"] = m.rope_factor;
    e["low_freq_factor"] = m.rope_low_freq_factor;
    e["high_freq_factor"] = m.rope_high_freq_factor;
    e["original_max_position_embeddings"] = m.rope_original_seq_len;
  }
  return e;
}

}  // namespace normlab::hf
