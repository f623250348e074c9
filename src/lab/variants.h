// A sweep with seeds, per variant (its grid point without the seed): the final val loss and the
// main diagnostics over the seeds as mean ± std (min–max), and a note for each pair of variants
// whose final val losses differ by no more than the seed spread. Every `sweep --seeds N` writes
// this table, with or without a learning-rate axis (with one, each lr is a variant of its own
// beside the sensitivity table).
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lab/seeds.h"
#include "lab/sweep.h"

namespace normlab {

struct VariantSeeds {
  std::string label;  // "optim.name=adamw, model.norm=dyt" (the full keys), or "all"
  std::map<std::string, std::string> variant;
  int seeds = 0;     // runs of the variant
  int diverged = 0;  // of them, without a final loss
  SeedStats final_loss, train_loss, max_attn_logit;
  // Guards that never acted in any run of the variant, said so ("QK-Clip never triggered: max
  // logit 0.7 < tau 10"), so that rows equal to another variant's are not read as "no effect".
  std::vector<std::string> idle_guards;
};

// The variants of `runs` in grid order (only when some point has more than one seed: else empty).
std::vector<VariantSeeds> variant_seeds(const std::vector<SweepRun>& runs);

// Markdown table, followed by the spread notes.
std::string variant_table(const std::vector<VariantSeeds>& vs);
std::vector<std::string> variant_notes(const std::vector<VariantSeeds>& vs);
nlohmann::json variants_json(const std::vector<VariantSeeds>& vs);

}  // namespace normlab
