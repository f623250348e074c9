// Which tokenizer a run uses, and the run directory's own copy of it. A run that does not use
// normlab's byte tokenizer keeps its tokenizer file as RUN/tokenizer.json or RUN/tokenizer.model,
// copied when the run starts (or by `import`), so that eval, generate, export, resume and runs
// started from it (train.init_from) find it wherever the original file went.
#pragma once
#include <memory>
#include <string>

#include "normlab/config.h"
#include "normlab/tokenizer.h"

namespace normlab {

struct RunTokenizer {
  std::unique_ptr<Tokenizer> tok;
  std::string file;  // the file it was loaded from; empty for the byte tokenizer
};

// The run directory a checkpoint folder RUN/checkpoints/step_N belongs to; a run directory (or
// anything else) is returned as it is.
std::string run_dir_of(const std::string& ckpt_or_run);
// RUN/tokenizer.json or RUN/tokenizer.model when the run has one, else empty.
std::string run_tokenizer_file(const std::string& run_dir);

// data.tokenizer "bytes" -> bytes; else the run's copy (when run_dir has one); else the file
// data.tokenizer names; else, when data.path is a token file that records its tokenizer, that
// one (from the recorded path); else, with train.init_from, the tokenizer of that source; else
// bytes. Unless it is the run's own copy (a run already checked), the result is held to the
// token file data.path names (check_token_file_tokenizer).
RunTokenizer resolve_tokenizer(const Config& cfg, const std::string& run_dir);

// Refuses (InputError naming both) a tokenizer that did not make the token file `data_path`:
// one whose hash is not the recorded one; for a token file of version 1, which records none, one
// whose vocabulary is not the file's (the byte tokenizer also takes a file of fewer ids). Nothing
// when data_path is not a token file. `chosen_by` says where `t` came from, for the message
// ("data.tokenizer = x.json").
// `named` is how the user named the file ("data.path = x.tok", "--data x.tok"); `fix`, when not
// empty, replaces the message's advice (eval --data: a command for the run).
void check_token_file_tokenizer(const std::string& data_path, const RunTokenizer& t,
                                const std::string& chosen_by,
                                const std::string& named = {}, const std::string& fix = {});

// model.vocab_size left at its default, 256 (the byte tokenizer's), becomes the tokenizer's
// vocabulary when that is larger; any other value is kept (check_vocab holds it to the
// tokenizer). Returns whether it changed.
bool resolve_vocab_size(ModelConfig& m, const RunTokenizer& t);

// Copies `file` into run_dir as tokenizer.json (JSON content) or tokenizer.model, atomically;
// nothing when it already is that file. Returns the copy's path.
std::string save_run_tokenizer(const std::string& run_dir, const std::string& file);

// The tokenizer's special tokens, with those named in a tokenizer_config.json beside its file
// (transformers' bos_token / eos_token / pad_token / unk_token, as a string or {"content": ...})
// taking precedence over what the tokenizer itself declares.
SpecialTokens run_special_tokens(const RunTokenizer& t);

// Refuses a model whose vocabulary is smaller than the tokenizer's (InputError naming both).
void check_vocab(const ModelConfig& m, const RunTokenizer& t);

}  // namespace normlab
