#include "interop/hf_tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "train/run_tokenizer.h"

namespace fs = std::filesystem;

namespace normlab {

namespace {

constexpr const char* kSideFiles[] = {"tokenizer_config.json", "special_tokens_map.json"};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in && !in.eof()) throw FormatError(fmt::format("[interop] {}: cannot read", p.string()));
  return s.str();
}

}  // namespace

std::vector<std::string> import_hf_tokenizer(const std::string& hf_dir, const std::string& run_dir) {
  std::vector<std::string> copied;
  std::string main;
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::is_regular_file(fs::path(hf_dir) / name)) {
      main = (fs::path(hf_dir) / name).string();
      break;
    }
  if (main.empty()) return copied;
  load_tokenizer(main);  // refuse what normlab cannot run before copying anything
  copied.push_back(fs::path(save_run_tokenizer(run_dir, main)).filename().string());
  for (const char* name : kSideFiles)
    if (fs::is_regular_file(fs::path(hf_dir) / name)) {
      write_file_atomic((fs::path(run_dir) / name).string(), read_all(fs::path(hf_dir) / name),
                        "[interop]");
      copied.push_back(name);
    }
  return copied;
}

std::vector<std::string> export_hf_tokenizer(const std::string& tokenizer_file,
                                             const std::string& run_dir, int seq_len,
                                             const std::string& out_dir) {
  std::vector<std::string> written;
  if (tokenizer_file.empty()) return written;
  const RunTokenizer rt{load_tokenizer(tokenizer_file), tokenizer_file};
  const Tokenizer* tok = rt.tok.get();
  const bool json = fs::path(tokenizer_file).extension() == ".json";
  const std::string main = json ? "tokenizer.json" : "tokenizer.model";
  write_file_atomic((fs::path(out_dir) / main).string(), read_all(tokenizer_file), "[interop]");
  written.push_back(main);
  const SpecialTokens sp = run_special_tokens(rt);  // tokenizer_config.json's names first
  const auto token = [&](std::optional<int> id) {
    return id ? nlohmann::json(tok->id_to_token(*id)) : nlohmann::json(nullptr);
  };
  for (const char* name : kSideFiles) {
    const fs::path kept = fs::path(run_dir) / name;
    if (fs::is_regular_file(kept)) {
      write_file_atomic((fs::path(out_dir) / name).string(), read_all(kept), "[interop]");
      written.push_back(name);
    } else if (std::string(name) == "tokenizer_config.json") {
      // What AutoTokenizer needs to load tokenizer.json (or convert tokenizer.model).
      nlohmann::json c;
      c["tokenizer_class"] = json ? "PreTrainedTokenizerFast" : "LlamaTokenizer";
      c["bos_token"] = token(sp.bos);
      c["eos_token"] = token(sp.eos);
      c["unk_token"] = token(sp.unk);
      c["pad_token"] = token(sp.pad);
      c["model_max_length"] = seq_len;
      c["clean_up_tokenization_spaces"] = false;
      if (!json) c["add_bos_token"] = sp.bos.has_value();
      write_file_atomic((fs::path(out_dir) / name).string(), c.dump(2) + "\n", "[interop]");
      written.push_back(name);
    }
  }
  // config.json: the special ids transformers' generate uses.
  const fs::path cfg = fs::path(out_dir) / "config.json";
  if (fs::is_regular_file(cfg)) {
    nlohmann::json j = nlohmann::json::parse(read_all(cfg));
    j["bos_token_id"] = sp.bos ? nlohmann::json(*sp.bos) : nlohmann::json(nullptr);
    j["eos_token_id"] = sp.eos ? nlohmann::json(*sp.eos) : nlohmann::json(nullptr);
    j["pad_token_id"] = sp.pad ? nlohmann::json(*sp.pad) : nlohmann::json(nullptr);
    write_file_atomic(cfg.string(), j.dump(2) + "\n", "[interop]");
  }
  return written;
}

}  // namespace normlab
