// The registry of the Hugging Face families (see hf_family.h): every record, in the order
// messages list them. The records are in hf_family_gpt2.cpp, hf_family_llama.cpp and
// hf_family_gemma.cpp, built from the shared parts of hf_family_rules.h.
#include <vector>

#include "interop/hf_family_rules.h"
#include "normlab/errors.h"

namespace normlab::hf {

const std::vector<FamilySpec>& families() {
  static const std::vector<FamilySpec> all{
      records::gpt2(),   records::llama(),  records::mistral(),     records::qwen2(),
      records::qwen3(),  records::gemma2(), records::gemma3_text(), records::olmo2()};
  return all;
}

const FamilySpec& family_spec(HfFamily f) {
  for (const FamilySpec& s : families())
    if (s.id == f) return s;
  NL_CHECK(false, "no record for HF family {}", static_cast<int>(f));
  return families().front();
}

}  // namespace normlab::hf
