#include "train/run_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "normlab/checkpoint.h"
#include "normlab/data.h"
#include "normlab/errors.h"

namespace fs = std::filesystem;

namespace normlab {

std::string run_dir_of(const std::string& ckpt_or_run) {
  fs::path p = fs::path(ckpt_or_run).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (p.filename() == "model.safetensors") p = p.parent_path();
  if (p.parent_path().filename() == "checkpoints") return p.parent_path().parent_path().string();
  return p.string();
}

std::string run_tokenizer_file(const std::string& run_dir) {
  if (run_dir.empty()) return {};
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    const fs::path f = fs::path(run_dir) / name;
    std::error_code ec;
    if (fs::is_regular_file(f, ec)) return f.string();
  }
  return {};
}

namespace {

RunTokenizer load(const std::string& file) { return {load_tokenizer(file), file}; }
RunTokenizer bytes() { return {std::make_unique<ByteTokenizer>(), {}}; }

std::string name_of(const RunTokenizer& t) { return t.file.empty() ? "bytes" : t.file; }

// "tok.json (tokenizer.json BPE, byte-level, 1024 tokens, fnv1a64:...)"
std::string show(const TokenizerRecord& r) {
  return fmt::format("{} ({}, {})", r.path, r.describe, r.hash);
}

// The tokenizer a token file's record names, from its recorded path; refused when that file is
// gone or is no longer the one that made the token file.
RunTokenizer recorded(const std::string& data_path, const TokenizerRecord& r) {
  if (r.is_bytes()) return bytes();
  std::error_code ec;
  if (!fs::is_regular_file(r.path, ec))
    throw InputError(fmt::format(
        "data.path = {} was tokenized with {}, which is gone: put that tokenizer back, or set "
        "data.tokenizer to a copy of it",
        data_path, show(r)));
  const std::string now = tokenizer_hash(r.path);
  if (now != r.hash)
    throw InputError(fmt::format(
        "data.path = {} was tokenized with {}, but that file has changed since (its hash is now "
        "{}): set data.tokenizer to the tokenizer that made the token file, or re-run normlab "
        "tokenize with {}",
        data_path, show(r), now, r.path));
  return load(r.path);
}

struct Resolved {
  RunTokenizer tok;
  std::string chosen_by;  // for messages; empty: the run's own copy, not checked again
};

Resolved resolve(const Config& cfg, const std::string& run_dir, int depth) {
  const std::string& spec = cfg.data.tokenizer;
  if (spec == "bytes") return {bytes(), "data.tokenizer = bytes"};
  if (const std::string own = run_tokenizer_file(run_dir); !own.empty()) return {load(own), {}};
  if (!spec.empty()) return {load(spec), "data.tokenizer = " + spec};
  const auto from_init = [&] {
    const std::string ckpt = resolve_checkpoint(cfg.train.init_from);
    Resolved r = resolve(checkpoint_config(ckpt), run_dir_of(ckpt), depth + 1);
    const std::string chosen = fmt::format("the tokenizer of train.init_from = {}, {}",
                                           cfg.train.init_from, name_of(r.tok));
    return Resolved{std::move(r.tok), chosen};
  };
  const bool init = !cfg.train.init_from.empty() && depth < 8;
  if (!cfg.data.path.empty())
    if (const auto info = token_file_info(cfg.data.path); info && info->tokenizer) {
      // The token file and train.init_from's source both name a tokenizer: they must agree, or
      // data.tokenizer says which (a new vocabulary for the source's weights is then intended).
      if (init) {
        const Resolved src = from_init();
        check_token_file_tokenizer(cfg.data.path, src.tok, src.chosen_by);
      }
      return {recorded(cfg.data.path, *info->tokenizer), "the token file's record"};
    }
  if (init) return from_init();
  return {bytes(), "the byte tokenizer (data.tokenizer is empty)"};
}

bool is_json(const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  char c = 0;
  while (f.get(c))
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c == '{';
  return false;
}

}  // namespace

RunTokenizer resolve_tokenizer(const Config& cfg, const std::string& run_dir) {
  Resolved r = resolve(cfg, run_dir, 0);
  if (!r.chosen_by.empty()) check_token_file_tokenizer(cfg.data.path, r.tok, r.chosen_by);
  return std::move(r.tok);
}

void check_token_file_tokenizer(const std::string& data_path, const RunTokenizer& t,
                                const std::string& chosen_by, const std::string& named,
                                const std::string& fix) {
  if (data_path.empty()) return;
  const std::string file = named.empty() ? "data.path = " + data_path : named;
  const std::optional<TokenFileInfo> info = token_file_info(data_path);
  if (!info) return;
  const int V = t.tok->vocab_size();
  if (info->tokenizer) {
    const TokenizerRecord& r = *info->tokenizer;
    const std::string hash = tokenizer_hash(t.file);
    if (hash != r.hash)
      throw InputError(fmt::format(
          "{} ({}, {}) is not the tokenizer that made the token file {}: {}; {}",
          chosen_by, t.tok->describe(), hash, file, show(r),
          !fix.empty() ? fix
                       : fmt::format("{}re-run normlab tokenize with {}",
                                     chosen_by.starts_with("data.tokenizer")
                                         ? "leave data.tokenizer empty to use the recorded one, or "
                                     : chosen_by.find("train.init_from") != std::string::npos
                                         ? "set data.tokenizer to the one to train with, or "
                                         : "",
                                     name_of(t))));
    return;
  }
  const bool bytes_cover = t.file.empty() && info->vocab_size <= V;
  if (info->vocab_size != V && !bytes_cover)
    throw InputError(fmt::format(
        "{} is a version 1 token file, which does not record its tokenizer, and its "
        "vocabulary ({} tokens) is not that of {} ({} tokens); {}",
        file, info->vocab_size, chosen_by, V,
        !fix.empty() ? fix
                     : std::string("set data.tokenizer to the tokenizer that made it, or re-run "
                                   "normlab tokenize (which records the tokenizer)")));
}

bool resolve_vocab_size(ModelConfig& m, const RunTokenizer& t) {
  const int V = t.tok->vocab_size();
  if (m.vocab_size != ModelConfig{}.vocab_size || V <= m.vocab_size) return false;
  m.vocab_size = V;
  return true;
}

std::string save_run_tokenizer(const std::string& run_dir, const std::string& file) {
  const fs::path dst = fs::path(run_dir) / (is_json(file) ? "tokenizer.json" : "tokenizer.model");
  std::error_code ec;
  if (fs::exists(dst, ec) && fs::equivalent(dst, file, ec)) return dst.string();
  std::ifstream in(file, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in && !in.eof())
    throw FormatError(fmt::format("[tokenizer] {}: cannot read it to copy into {}", file, run_dir));
  fs::create_directories(run_dir);
  write_file_atomic(dst.string(), bytes.str(), "[tokenizer]");
  return dst.string();
}

SpecialTokens run_special_tokens(const RunTokenizer& t) {
  SpecialTokens sp = t.tok->special();
  if (t.file.empty()) return sp;
  const fs::path cfg = fs::path(t.file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return sp;
  nlohmann::json j;
  try {
    std::ifstream in(cfg);
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw FormatError(fmt::format("[tokenizer] {}: not valid JSON: {}", cfg.string(), e.what()));
  }
  if (!j.is_object()) return sp;
  const auto named = [&](const char* key, std::optional<int>& slot) {
    const auto it = j.find(key);
    if (it == j.end()) return;
    const nlohmann::json& v = it->is_object() && it->contains("content") ? (*it)["content"] : *it;
    if (!v.is_string()) return;
    if (const auto id = t.tok->token_to_id(v.get<std::string>())) slot = *id;
  };
  named("bos_token", sp.bos);
  named("eos_token", sp.eos);
  named("pad_token", sp.pad);
  named("unk_token", sp.unk);
  return sp;
}

void check_vocab(const ModelConfig& m, const RunTokenizer& t) {
  if (t.tok->vocab_size() > m.vocab_size)
    throw InputError(fmt::format(
        "model.vocab_size = {} is smaller than the vocabulary of the tokenizer {} ({} tokens): "
        "set model.vocab_size to at least {}",
        m.vocab_size, t.file.empty() ? std::string("bytes") : t.file, t.tok->vocab_size(),
        t.tok->vocab_size()));
}

}  // namespace normlab
