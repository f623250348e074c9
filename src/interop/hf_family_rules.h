// The parts the Hugging Face family records are built from (internal to the records: the
// hf_family_*.cpp files and the registry, hf_families.cpp): small rules about a model config, the
// export requirements several families list, the llama-like config.json keys and skeleton (tensor
// links, base record), and one function per family record for families(). The names live in
// hf::records, apart from the other files of src/interop, which unity builds compile together.
#pragma once
#include <cmath>
#include <vector>

#include "interop/hf_family.h"

namespace normlab::hf::records {

inline double inv_sqrt_d(const ModelConfig& m) {
  return 1.0 / std::sqrt(static_cast<double>(m.head_size()));
}
inline bool any_sliding(const ModelConfig& m) {
  for (int l = 0; l < m.n_layer; ++l)
    if (m.layer_sliding(l)) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Export requirements shared by the records that list them (hf_family_rules.cpp).

// QK-norm: a family with one has rmsnorm over its scope before RoPE; the others have none.
extern const Requirement kQkRms, kQkScope, kQkPreRope, kNoQk;
// Norm, positions, MLP and the bias groups of the family's BiasKeys.
extern const Requirement kRmsNorm, kRope, kGatedMlp, kBiases;
// Attention layout, sliding windows and RoPE bases.
extern const Requirement kMhaKv, kHeadDimCOverH, kNoSliding, kSlidingEveryLayer, kOneRope;
// The plain norm gain w, unscaled embeddings, no soft-caps, scores by 1/sqrt(head_dim).
extern const Requirement kPlainGain, kNoEmbedScale, kNoAttnCap, kNoFinalCap, kStdAttnScale;

// ---------------------------------------------------------------------------------------------
// config.json keys of the llama-like families beyond the key map (hf_family_config.cpp): biases,
// dropout and padding notes, sliding layers, RoPE, and the context (max_position_embeddings).

void llama_read(HfKeys& k, const FamilySpec& f, ModelConfig& m, ReadContext& cx);
void llama_write(json& j, const FamilySpec& f, const ModelConfig& m);

// ---------------------------------------------------------------------------------------------
// The llama-like skeleton (hf_family_rules.cpp): the block's tensor links around the given norms
// and QK-norms, the integer keys with the family's defaults, and the record the families refine.

std::vector<LinkRule> llama_block(std::vector<LinkRule> norms, std::vector<LinkRule> qk_norms);
std::vector<IntKey> llama_ints(long vocab, long hidden, long inter, long layers, long heads);
FamilySpec llama_like(HfFamily id, const char* type, const char* arch, Placement p);

// ---------------------------------------------------------------------------------------------
// The records, in the order families() lists them (hf_family_gpt2.cpp, hf_family_llama.cpp,
// hf_family_gemma.cpp).

FamilySpec gpt2();
FamilySpec llama();
FamilySpec mistral();
FamilySpec qwen2();
FamilySpec qwen3();
FamilySpec gemma2();
FamilySpec gemma3_text();
FamilySpec olmo2();

}  // namespace normlab::hf::records
