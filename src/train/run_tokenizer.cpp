#include "train/run_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "normlab/checkpoint.h"
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

RunTokenizer resolve(const Config& cfg, const std::string& run_dir, int depth) {
  const std::string& spec = cfg.data.tokenizer;
  if (spec == "bytes") return {std::make_unique<ByteTokenizer>(), {}};
  if (const std::string own = run_tokenizer_file(run_dir); !own.empty()) return load(own);
  if (!spec.empty()) return load(spec);
  if (!cfg.train.init_from.empty() && depth < 8) {
    const std::string ckpt = resolve_checkpoint(cfg.train.init_from);
    return resolve(checkpoint_config(ckpt), run_dir_of(ckpt), depth + 1);
  }
  return {std::make_unique<ByteTokenizer>(), {}};
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
  return resolve(cfg, run_dir, 0);
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
