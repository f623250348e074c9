// Reading a Hugging Face config.json (internal to src/interop): typed access to its keys with the
// defaults of the transformers config class (a key left out takes the class default, as
// from_pretrained does), collecting every problem instead of throwing at the first.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "normlab/config.h"

namespace normlab::hf {

using json = nlohmann::json;

class HfKeys {
 public:
  HfKeys(const json& j, std::string where, std::vector<std::string>& problems)
      : j_(j), where_(std::move(where)), problems_(problems) {}

  const json* raw(const std::string& key) const;  // nullptr when absent or null
  bool present(const std::string& key) const { return raw(key) != nullptr; }
  std::string show(const std::string& key) const;  // "text_config.key = value"
  void refuse(const std::string& key, const std::string& why);
  void refuse_value(const std::string& key, const std::string& value, const std::string& why);

  long integer(const std::string& key, long def);
  // null in config.json means "off" (soft-caps, sliding window, n_inner).
  std::optional<long> optional_integer(const std::string& key, std::optional<long> def);
  double number(const std::string& key, double def);
  std::optional<double> optional_number(const std::string& key, std::optional<double> def);
  bool boolean(const std::string& key, bool def);
  std::string string(const std::string& key, const std::string& def);
  const std::string& where() const { return where_; }

 private:
  bool is_null(const std::string& key) const { return j_.contains(key) && j_.at(key).is_null(); }
  const json& j_;
  std::string where_;  // "" or "text_config."
  std::vector<std::string>& problems_;
};

// HF activation names by formula (transformers/activations.py, ACT2FN).
enum class ActFormula { tanh_gelu, erf_gelu, silu, other };
ActFormula act_formula(const std::string& hf_name);

// |a - b| within 1e-12 relative.
bool close(double a, double b);

// Dropout is training-only in HF (eval mode is exact); normlab has none, so a note, not a refusal.
void note_dropout(HfKeys& k, const std::vector<std::pair<std::string, double>>& keys,
                  std::vector<std::string>& notes);

// One RoPE as config.json describes it: type (default = none, linear, llama3), base and the
// scaling parameters (those the type does not use keep normlab's defaults).
struct RopeSpec {
  RopeScaling type = RopeScaling::none;
  double theta = 10000.0;
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  long original_seq_len = 8192;
  friend bool operator==(const RopeSpec&, const RopeSpec&) = default;
};

// The RoPE of one rope_parameters entry (transformers 5: {"rope_type", "rope_theta", "factor",
// ...}, flat or per layer type) or of the legacy keys (rope_theta / rope_local_base_freq,
// rope_scaling; the legacy rope_scaling applies to global layers only). Types other than default,
// linear and llama3, and partial rotary factors, are refused. max_pos: max_position_embeddings,
// llama3's original context when nothing else gives it (as transformers).
RopeSpec read_rope(HfKeys& k, const char* layer_type, const std::string& legacy_theta_key,
                   double default_theta, long max_pos);
// ModelConfig's global RoPE <- spec, and the rope_parameters entry of model m's global RoPE.
void set_rope(ModelConfig& m, const RopeSpec& r);
json rope_entry(const ModelConfig& m);

}  // namespace normlab::hf
