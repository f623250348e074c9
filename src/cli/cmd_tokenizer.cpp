// `normlab tokenizer train|encode|decode|info`: train a byte-level BPE tokenizer.json on a text
// file or folder, and inspect any tokenizer normlab loads ("bytes", tokenizer.json, .model).
// `encode --lines --time` is also the normlab side of bench/tokenizers.sh.
#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "io/atomic_file.h"
#include "normlab/data.h"
#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "tensor/threading.h"
#include "text/bpe_train.h"
#include "text/utf8.h"

namespace normlab::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(fmt::format("[tokenizer] {}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw FormatError(fmt::format("[tokenizer] {}: read failed", path));
  return ss.str();
}

// Splits at '\n' (the '\n' belongs to neither side); a final '\n' ends the last line.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t nl = text.find('\n', at);
    if (nl == std::string_view::npos) {
      lines.push_back(text.substr(at));
      break;
    }
    lines.push_back(text.substr(at, nl - at));
    at = nl + 1;
  }
  return lines;
}

// A JSON string literal of s (invalid UTF-8 shown as U+FFFD).
std::string json_quote(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::vector<int> parse_ids(std::string_view s, std::string_view what) {
  std::vector<int> ids;
  std::size_t at = 0;
  while (at <= s.size()) {
    std::size_t end = s.find(',', at);
    if (end == std::string_view::npos) end = s.size();
    std::string_view f = s.substr(at, end - at);
    while (!f.empty() && f.front() == ' ') f.remove_prefix(1);
    while (!f.empty() && (f.back() == ' ' || f.back() == '\r')) f.remove_suffix(1);
    if (!f.empty() || end < s.size()) {
      int v = 0;
      const auto [p, ec] = std::from_chars(f.data(), f.data() + f.size(), v);
      if (ec != std::errc() || p != f.data() + f.size())
        throw InputError(fmt::format("[tokenizer] {}: '{}' is not a token id", what, f));
      ids.push_back(v);
    }
    at = end + 1;
  }
  return ids;
}

std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  return out;
}

// A JSON list; a token that is not whole UTF-8 (a byte of the byte tokenizer) shows as U+FFFD.
std::string token_list(const Tokenizer& tok, const std::vector<int>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i)
    out += (i ? ", " : "") + json_quote(text::utf8_lossy(tok.id_to_token(ids[i])));
  return out + "]";
}

void add_train_cmd(CLI::App* parent, Action& action) {
  auto* cmd = parent->add_subcommand(
      "train", "Train a byte-level BPE (GPT-2 pre-tokenization) on a text file or folder and "
               "write a tokenizer.json that normlab and the `tokenizers` package load");
  struct Opts {
    std::string data, out, specials;
    int vocab_size = 0, min_frequency = 2, threads = 0;
    bool add_prefix_space = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--data,-d", o->data, "Text file or folder (one document per file)")
      ->required();
  cmd->add_option("--vocab-size,-v", o->vocab_size,
                  "Tokens in the vocabulary: the 256 bytes, the special tokens and the merges")
      ->required()
      ->check(integer_option(1));
  cmd->add_option("--out,-o", o->out, "tokenizer.json to write")->required();
  cmd->add_option("--special-tokens", o->specials,
                  "Comma-separated special tokens, given ids 0, 1, ... (e.g. \"<|endoftext|>\")");
  cmd->add_option("--min-frequency", o->min_frequency,
                  "Never merge a pair seen fewer times (default 2)")
      ->check(integer_option(1));
  cmd->add_flag("--add-prefix-space", o->add_prefix_space,
                "Prepend a space to each document (and to each text encoded later)");
  cmd->add_option("--threads", o->threads, "Threads for counting (default: all cores)")
      ->check(integer_option(1));
  cmd->callback([&action, o] {
    action = [o] {
      if (o->threads > 0) set_thread_count(o->threads);
      BpeTrainOptions opt;
      opt.vocab_size = o->vocab_size;
      opt.min_frequency = o->min_frequency;
      opt.add_prefix_space = o->add_prefix_space;
      if (!o->specials.empty()) {
        std::string_view s = o->specials;
        for (std::size_t at = 0; at <= s.size();) {
          std::size_t end = s.find(',', at);
          if (end == std::string_view::npos) end = s.size();
          opt.special_tokens.emplace_back(s.substr(at, end - at));
          at = end + 1;
        }
      }
      const auto docs = read_text_documents(o->data);
      std::vector<std::string_view> texts;
      for (const auto& d : docs) texts.push_back(d.text);
      const auto t0 = Clock::now();
      const text::BpeTrainResult r = text::train_bpe(texts, opt);
      const double secs = seconds_since(t0);
      write_file_atomic(o->out, r.json, "[tokenizer]");
      fmt::print("wrote {}: byte-level BPE, {} tokens ({} special, {} merges) from {} "
                 "document{}, {} bytes, {} distinct pre-tokens\n",
                 o->out, r.vocab_size, opt.special_tokens.size(), r.merges, docs.size(),
                 docs.size() == 1 ? "" : "s", r.text_bytes, r.distinct_words);
      fmt::print("training took {:.2f} s; the training text is {} tokens, {:.4f} tokens/byte "
                 "({:.3f} bytes/token)\n",
                 secs, r.text_tokens, double(r.text_tokens) / double(r.text_bytes),
                 double(r.text_bytes) / double(r.text_tokens));
      if (r.vocab_size < o->vocab_size)
        fmt::print("note: stopped at {} tokens: no pair is seen {} times or more\n",
                   r.vocab_size, o->min_frequency);
      return kExitOk;
    };
  });
}

void add_encode_cmd(CLI::App* parent, Action& action) {
  auto* cmd = parent->add_subcommand("encode", "Text -> token ids");
  struct Opts {
    std::string spec, text, input;
    bool has_text = false, add_special = false, tokens = false, lines = false, time = false;
    int threads = 0, repeat = 1;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--tokenizer,-t", o->spec, "\"bytes\", a tokenizer.json or a .model")
      ->required();
  auto* text = cmd->add_option("--text", o->text, "The text to encode");
  auto* input = cmd->add_option("--input,-i", o->input, "A file whose text to encode");
  text->excludes(input);
  cmd->add_flag("--add-special", o->add_special, "Add BOS/EOS as the tokenizer's template says");
  cmd->add_flag("--tokens", o->tokens, "Print the token strings (a JSON list) instead of ids");
  cmd->add_flag("--lines", o->lines,
                "Encode each line of the text on its own (in parallel); one output line each");
  cmd->add_flag("--time", o->time,
                "Print only the encode throughput (JSON: bytes, seconds, MB/s, tokens)");
  cmd->add_option("--repeat", o->repeat, "With --time: encode this many times, report the best")
      ->check(integer_option(1));
  cmd->add_option("--threads", o->threads, "Threads (default: all cores)")
      ->check(integer_option(1));
  cmd->callback([&action, o, text] {
    o->has_text = text->count() > 0;
    action = [o] {
      if (!o->has_text && o->input.empty())
        throw InputError("[tokenizer] encode: give --text or --input");
      if (o->threads > 0) set_thread_count(o->threads);
      const auto tok = load_tokenizer(o->spec);
      const std::string data = o->has_text ? o->text : read_file(o->input);
      std::vector<std::string_view> texts;
      if (o->lines) texts = split_lines(data);
      else texts.push_back(data);
      if (o->time) {
        double best = 0;
        long long tokens = 0;
        for (int r = 0; r < o->repeat; ++r) {
          const auto t0 = Clock::now();
          const auto ids = tok->encode_batch(texts, o->add_special);
          const double s = seconds_since(t0);
          if (r == 0 || s < best) best = s;
          tokens = 0;
          for (const auto& v : ids) tokens += static_cast<long long>(v.size());
        }
        long long bytes = 0;
        for (const auto t : texts) bytes += static_cast<long long>(t.size());
        fmt::print("{{\"bytes\": {}, \"texts\": {}, \"seconds\": {:.6f}, \"mb_per_s\": {:.3f}, "
                   "\"tokens\": {}, \"threads\": {}}}\n",
                   bytes, texts.size(), best, double(bytes) / 1e6 / best, tokens,
                   thread_count());
        return kExitOk;
      }
      const auto ids = tok->encode_batch(texts, o->add_special);
      std::string out;
      for (const auto& v : ids) out += (o->tokens ? token_list(*tok, v) : join_ids(v)) + "\n";
      fmt::print("{}", out);
      return kExitOk;
    };
  });
}

void add_decode_cmd(CLI::App* parent, Action& action) {
  auto* cmd = parent->add_subcommand("decode", "Token ids -> text");
  struct Opts {
    std::string spec, ids, ids_file;
    bool skip_special = false, hex = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--tokenizer,-t", o->spec, "\"bytes\", a tokenizer.json or a .model")
      ->required();
  auto* ids = cmd->add_option("--ids", o->ids, "Comma-separated ids; prints the text");
  auto* file = cmd->add_option("--ids-file", o->ids_file,
                               "A file of comma-separated id lists, one per line; prints one "
                               "JSON string per line");
  ids->excludes(file);
  cmd->add_flag("--skip-special", o->skip_special, "Drop special tokens");
  cmd->add_flag("--hex", o->hex,
                "Print the exact bytes the ids stand for, in hex (no U+FFFD replacement)");
  cmd->callback([&action, o] {
    action = [o] {
      if (o->ids.empty() && o->ids_file.empty())
        throw InputError("[tokenizer] decode: give --ids or --ids-file");
      const auto tok = load_tokenizer(o->spec);
      const auto text = [&](const std::vector<int>& v) {
        if (!o->hex) return tok->decode(v, o->skip_special);
        std::string h;
        for (const char c : tok->decode_bytes(v, o->skip_special))
          h += fmt::format("{:02x}", static_cast<unsigned char>(c));
        return h;
      };
      if (!o->ids_file.empty()) {
        const std::string data = read_file(o->ids_file);
        std::string out;
        std::size_t n = 0;
        for (const auto line : split_lines(data))
          out += json_quote(text(parse_ids(line, fmt::format("{} line {}", o->ids_file, ++n))))
                 + "\n";
        fmt::print("{}", out);
        return kExitOk;
      }
      fmt::print("{}\n", text(parse_ids(o->ids, "--ids")));
      return kExitOk;
    };
  });
}

void add_info_cmd(CLI::App* parent, Action& action) {
  auto* cmd = parent->add_subcommand("info", "What a tokenizer is, its special tokens, and its "
                                             "bytes per token on the embedded corpus");
  auto spec = std::make_shared<std::string>();
  cmd->add_option("--tokenizer,-t", *spec, "\"bytes\", a tokenizer.json or a .model")->required();
  cmd->callback([&action, spec] {
    action = [spec] {
      const auto tok = load_tokenizer(*spec);
      fmt::print("{}\nvocab size: {}\n", tok->describe(), tok->vocab_size());
      const SpecialTokens sp = tok->special();
      const auto show = [&](const char* what, const std::optional<int>& id) {
        if (id) fmt::print("{}: {} {}\n", what, *id, json_quote(tok->id_to_token(*id)));
        else fmt::print("{}: none\n", what);
      };
      show("bos", sp.bos);
      show("eos", sp.eos);
      show("pad", sp.pad);
      show("unk", sp.unk);
      std::vector<int> flagged;
      for (int id = 0; id < tok->vocab_size(); ++id)
        if (tok->is_special(id)) flagged.push_back(id);
      std::string list;
      for (std::size_t i = 0; i < flagged.size() && i < 16; ++i)
        list += fmt::format("{}{} {}", i ? ", " : " ", flagged[i],
                            json_quote(tok->id_to_token(flagged[i])));
      fmt::print("special ids ({}):{}{}\n", flagged.size(), flagged.empty() ? " none" : list,
                 flagged.size() > 16 ? ", ..." : "");
      // Line by line (in parallel); the newlines count as one byte each and are not encoded.
      const std::string_view corpus = embedded_corpus();
      const auto lines = split_lines(corpus);
      long long tokens = 0;
      for (const auto& v : tok->encode_batch(lines)) tokens += static_cast<long long>(v.size());
      const long long bytes = static_cast<long long>(corpus.size() - lines.size());
      fmt::print("embedded corpus: {} bytes in {} lines -> {} tokens, {:.3f} bytes/token "
                 "(lines encoded one by one, newlines not counted)\n",
                 bytes, lines.size(), tokens, double(bytes) / double(tokens));
      return kExitOk;
    };
  });
}

}  // namespace

void add_tokenizer(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("tokenizer", "Train a BPE tokenizer; encode, decode and inspect "
                                              "tokenizers (bytes, tokenizer.json, .model)");
  cmd->require_subcommand(1);
  add_train_cmd(cmd, action);
  add_encode_cmd(cmd, action);
  add_decode_cmd(cmd, action);
  add_info_cmd(cmd, action);
}

}  // namespace normlab::cli
