// What Hugging Face export does with each model key (internal to src/interop): the keys the
// families carry into config.json or check with their requirements, the keys that only decide
// the initialization (no effect on the function of the exported weights), and the keys no family
// has, with their refusal. A model key the table does not name is refused on export whenever it
// is set away from its default: a new model option is refused by default, with no edit here or in
// hf.cpp, until a family maps it.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "normlab/config.h"

namespace normlab::hf {

enum class ExportRule {
  mapped,     // config.json carries it, or a family's requirement (or the placement or init
              // refusal) checks it
  init_only,  // decides the initial weights only: the exported weights say everything
  refused,    // no family has it: refused, with `note`, whenever set away from its default
};

struct ExportKey {
  std::string_view key;  // "model.attn_sink"
  ExportRule rule;
  const char* note = "";  // refused: why no family has it
};

const std::vector<ExportKey>& export_keys();

// "model.K = V: ..." for every model key set away from its default that `table` refuses or does
// not name, in the order of the key table.
std::vector<std::string> unexportable_keys(const ModelConfig& m,
                           const std::vector<ExportKey>& table = export_keys());

}  // namespace normlab::hf
