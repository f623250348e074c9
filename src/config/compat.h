// The compatibility table (private to src/config): every refusal of one option by another, one
// row each, with its message. A new cross-option refusal is one row here and its case in
// tests/config/test_compat.cpp; a key's own range lives in its key row (keys.cpp), and the rules
// of one shape over several keys (divisibility, RoPE's even head size) in validation_errors.
#pragma once
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/config.h"

namespace normlab::compat {

struct Rule {
  // The feature whose recipe refuses (nGPT, DeepNorm, Admin, HybridNorm), for docs and tests.
  std::string_view group;
  // The refused combination.
  std::function<bool(const Config&)> refuses;
  // What validation reports, naming the keys and values.
  std::function<std::string(const Config&)> message;
  // The way out: the keys any one of which, changed, clears the refusal, as the message names
  // them ("model.qk_norm", "model.placement").
  std::vector<std::string_view> way_out;
};

// Every row, in the order validation reports them.
std::span<const Rule> rules();

// The message of every row that refuses `c`, in table order.
std::vector<std::string> problems(const Config& c);

}  // namespace normlab::compat
