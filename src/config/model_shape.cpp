// Shapes derived from the model section: the layer pattern (which layers use sliding-window
// attention), the Post-Norm blocks of a placement, and the μP base model (the narrow model a μP
// run's multipliers refer to). Split from config.cpp, which validates; these derive.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "normlab/config.h"
#include "normlab/errors.h"

namespace normlab {

namespace {
// The layer types a valid pattern gives (true = sliding), or the reason it is not valid.
std::optional<std::string> parse_layer_pattern(std::string_view pat, int n_layer,
                                               std::vector<bool>* out) {
  std::vector<bool> t;
  if (pat == "global" || pat == "sliding") {
    t.assign(n_layer > 0 ? n_layer : 0, pat == "sliding");
  } else if (pat.starts_with("every:")) {
    const std::string_view num = pat.substr(6);
    int k = 0;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), k);
    if (ec != std::errc() || end != num.data() + num.size() || k < 1)
      return "is not valid: \"every:K\" needs an integer K >= 1";
    for (int l = 0; l < n_layer; ++l) t.push_back((l + 1) % k != 0);
  } else {
    std::size_t pos = 0;
    while (pos <= pat.size()) {
      const std::size_t comma = std::min(pat.find(',', pos), pat.size());
      std::string_view w = pat.substr(pos, comma - pos);
      while (!w.empty() && w.front() == ' ') w.remove_prefix(1);
      while (!w.empty() && w.back() == ' ') w.remove_suffix(1);
      if (w == "global" || w == "sliding")
        t.push_back(w == "sliding");
      else
        return fmt::format("is not valid: \"{}\" is not a layer type (allowed: \"global\", "
                           "\"sliding\", \"every:K\", or a comma list of global/sliding, one "
                           "per layer)",
                           w);
      pos = comma + 1;
    }
    if (static_cast<int>(t.size()) != n_layer)
      return fmt::format("lists {} layer types; model.n_layer = {}", t.size(), n_layer);
  }
  if (out) *out = std::move(t);
  return std::nullopt;
}
}  // namespace

std::optional<std::string> layer_pattern_error(std::string_view pattern, int n_layer) {
  return parse_layer_pattern(pattern, n_layer, nullptr);
}

bool ModelConfig::layer_sliding(int l) const {
  std::vector<bool> t;
  if (parse_layer_pattern(layer_pattern, n_layer, &t)) return false;
  return l >= 0 && l < static_cast<int>(t.size()) && t[l];
}

int ModelConfig::post_norm_blocks() const {
  const int L = std::max(n_layer, 0);
  if (placement == Placement::post) return L;
  if (placement != Placement::mix || !(mix_ratio > 0)) return 0;  // NaN: none
  if (mix_ratio >= 1) return L;
  // Mix-LN (Li et al. 2024): the epsilon keeps 0.3 * 10 = 3.0000000000000004 at 3 blocks.
  return static_cast<int>(std::ceil(mix_ratio * L - 1e-9));
}

namespace {
// n * num / den when it is a whole number; std::nullopt otherwise.
std::optional<int> scaled_width(long n, long num, long den) {
  if (den <= 0 || (n * num) % den != 0) return std::nullopt;
  return static_cast<int>(n * num / den);
}
}  // namespace

ModelConfig mup_base_model(const ModelConfig& m) {
  const int C = m.d_model, C0 = m.mup_base_width;
  if (C0 <= 0) throw ConfigError({"model.mup_base_width must be > 0 to describe a μP base model"});
  auto need = [&](std::optional<int> v, std::string_view what, long n, std::string_view hint) {
    if (!v || *v <= 0)
      throw ConfigError({fmt::format(
          "μP base model: {} = {} does not scale to a whole number at model.mup_base_width = {} "
          "(x {}/{}){}", what, n, C0, C0, C, hint)});
    return *v;
  };
  ModelConfig b = m;
  b.parametrization = Parametrization::standard;
  b.d_model = C0;
  b.d_ff = m.mup_base_d_ff > 0 ? m.mup_base_d_ff
                               : need(scaled_width(m.d_ff, C0, C), "model.d_ff", m.d_ff,
                                      "; set model.mup_base_d_ff");
  const int Cq0 = need(scaled_width(m.q_width(), C0, C), "the query width n_head * head size",
                       m.q_width(), "");
  int D0 = m.mup_base_head_dim > 0 ? m.mup_base_head_dim
           : m.head_dim > 0        ? m.head_dim
                                   : need(scaled_width(Cq0, 1, m.n_head), "the base query width",
                                          Cq0, fmt::format(" over {} heads", m.n_head));
  const int H0 = need(scaled_width(Cq0, 1, D0), "the base query width", Cq0,
                      fmt::format(" in heads of {}; set model.mup_base_head_dim", D0));
  const int Hkv0 = need(scaled_width(H0, m.kv_heads(), m.n_head), "model.n_kv_head",
                        m.kv_heads(), " (key/value heads of the base)");
  b.n_head = H0;
  b.n_kv_head = m.n_kv_head > 0 ? Hkv0 : 0;
  b.head_dim = D0;
  return b;
}

}  // namespace normlab
