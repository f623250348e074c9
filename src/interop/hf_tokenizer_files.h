// The tokenizer files of a Hugging Face model directory, carried through `import` and `export`.
// import copies tokenizer.json (or tokenizer.model) into the run directory, where the run uses it
// (train/run_tokenizer.h), with tokenizer_config.json and special_tokens_map.json kept beside it
// for export; export writes them back next to config.json, with a tokenizer_config.json made for
// transformers' AutoTokenizer when the run has none, and the tokenizer's BOS/EOS ids in
// config.json (which transformers' generate stops at).
#pragma once
#include <string>
#include <vector>

namespace normlab {

// Returns the names of the files copied (empty when the model directory has no tokenizer).
std::vector<std::string> import_hf_tokenizer(const std::string& hf_dir, const std::string& run_dir);

// `tokenizer_file`: the run's tokenizer (run_tokenizer_file); empty: the byte tokenizer, which
// has no Hugging Face form (nothing is written). Returns the names of the files written.
std::vector<std::string> export_hf_tokenizer(const std::string& tokenizer_file,
                                             const std::string& run_dir, int seq_len,
                                             const std::string& out_dir);

}  // namespace normlab
