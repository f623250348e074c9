// Hugging Face tokenizer.json: a BPE model with the normalizers, pre-tokenizers, added tokens,
// decoders and post-processors of the byte-level (GPT-2, Llama 3, OLMo 2, Qwen 2) and
// SentencePiece-style byte-fallback (Llama 2, Gemma, Mistral) families, encoding and decoding as
// the `tokenizers` package (0.23) does. Anything outside that set is refused at load with the
// file and the JSON path of the component; nothing is silently ignored.
//
// Encoding runs the reference's pipeline: added tokens with normalized=false are cut out of the
// raw text, each remaining piece is normalized, tokens with normalized=true are cut out of the
// normalized text, then the pre-tokenizers split what is left into words, and each word goes
// through BPE (merged by rank, lowest first, ties leftmost) behind a per-word cache. Pre-
// tokenizers stream words through a chain instead of building lists, and when the last step is
// ByteLevel the words stay raw bytes: the byte -> character map is folded into the initial BPE
// symbols, so the hot path allocates nothing per word.
//
// This file holds HfTokenizer's encoding and the loader; the types it composes are declared in
// hf_tokenizer_detail.h, and the parts live in hf_json (reading), hf_unicode.h, hf_normalizer,
// hf_pre_tokenizer, hf_bpe (the model), hf_added_tokens and hf_decoder.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "text/hf_tokenizer_detail.h"
#include "text/utf8.h"

namespace normlab {

namespace text::hf {

// --- The tokenizer -----------------------------------------------------------------------------

std::vector<int> HfTokenizer::encode(std::string_view text, bool add_special) const {
  for (std::size_t i = 0; i < text.size();) {
    std::size_t bad = 0;
    const std::size_t n = text::utf8_sequence(text, i, &bad);
    if (!n)
      throw InputError(fmt::format(
          "[tokenizer] text is not valid UTF-8: byte 0x{:02X} at offset {} starts no "
          "well-formed sequence",
          static_cast<unsigned>(static_cast<unsigned char>(text[i])), i));
    i += n;
  }
  std::vector<int> out;
  out.reserve(text.size() / 3 + 4);
  raw_matcher.split(
      text,
      [&](std::size_t b, std::size_t e) {
        const std::string_view piece = text.substr(b, e - b);
        if (normalizer.empty()) {
          encode_normalized(piece, b == 0, out);
        } else {
          const std::string norm = normalize(normalizer, piece);
          encode_normalized(norm, b == 0, out);
        }
      },
      [&](const AddedToken& t) { out.push_back(t.id); });
  if (add_special)
    for (const Template& t : templates) {
      std::vector<int> with;
      with.reserve(out.size() + 4);
      for (const auto& item : t.single)
        if (item.is_sequence) with.insert(with.end(), out.begin(), out.end());
        else with.insert(with.end(), item.ids.begin(), item.ids.end());
      out = std::move(with);
    }
  return out;
}

std::optional<int> HfTokenizer::token_to_id(std::string_view token) const {
  for (const auto& a : added)
    if (a->content == token) return a->id;
  if (const auto it = bpe.vocab.find(token); it != bpe.vocab.end()) return it->second;
  return std::nullopt;
}

std::vector<int> HfTokenizer::token_byte_lengths() const {
  std::vector<int> len(size);
  for (int id = 0; id < size; ++id)
    len[id] = is_special(id) ? 0
                             : static_cast<int>(run_decoder(std::span<const int>(&id, 1), false,
                                                            Mode::kInContext)
                                                    .size());
  return len;
}

void HfTokenizer::encode_normalized(std::string_view s, bool at_origin,
                                    std::vector<int>& out) const {
  normalized_matcher.split(
      s,
      [&](std::size_t b, std::size_t e) {
        pre_tokenize(0, s.substr(b, e - b), at_origin && b == 0, out);
      },
      [&](const AddedToken& t) { out.push_back(t.id); });
}

// --- Loading -----------------------------------------------------------------------------------

namespace {

void read_post_processor(const Reader& r, const json& v, const std::string& path,
                         HfTokenizer& tok) {
  if (v.is_null()) return;
  const std::string type = r.type_of(v, path);
  if (type == "Sequence") {
    r.each_in(v, path, "processors",
              [&](const json& m, const std::string& at) { read_post_processor(r, m, at, tok); });
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type != "TemplateProcessing")
    r.unsupported(path, type, "ByteLevel, TemplateProcessing, Sequence");
  const json* specials = r.field(v, "special_tokens");
  if (specials && !specials->is_null() && !specials->is_object())
    r.fail(path + "/special_tokens", "expected an object");
  const json* single = r.field(v, "single");
  if (!single || !single->is_array()) r.fail(path + "/single", "expected an array");
  Template t;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const std::string p = fmt::format("{}/single/{}", path, i);
    const json& item = r.object((*single)[i], p);
    Template::Item out;
    if (const json* s = r.field(item, "Sequence")) {
      const std::string id = r.string(r.object(*s, p + "/Sequence"), p + "/Sequence", "id");
      if (id != "A") r.fail(p + "/Sequence/id", fmt::format("\"{}\" in a single template", id));
      out.is_sequence = true;
    } else if (const json* s = r.field(item, "SpecialToken")) {
      const std::string sp = p + "/SpecialToken";
      const std::string name = r.string(r.object(*s, sp), sp, "id");
      const json* entry = specials ? r.field(*specials, name.c_str()) : nullptr;
      const std::string ep = path + "/special_tokens/" + name;
      if (!entry || !entry->is_object()) r.fail(ep, "missing: the template names it");
      const json* ids = r.field(*entry, "ids");
      if (!ids || !ids->is_array()) r.fail(ep + "/ids", "expected an array of ids");
      for (std::size_t k = 0; k < ids->size(); ++k) {
        const json& x = (*ids)[k];
        if (!x.is_number_integer() || x.get<std::int64_t>() < 0 ||
            x.get<std::int64_t>() >= tok.size)
          r.fail(fmt::format("{}/ids/{}", ep, k),
                 fmt::format("expected an id in [0, {})", tok.size));
        out.ids.push_back(static_cast<int>(x.get<std::int64_t>()));
      }
    } else {
      r.fail(p, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
    t.single.push_back(std::move(out));
  }
  tok.templates.push_back(std::move(t));
}

// The whole document; load_hf_tokenizer_json (normlab/tokenizer.h) is its public name.
std::unique_ptr<Tokenizer> load_tokenizer_json(std::string_view text, const std::string& name) {
  const Reader r{name};
  check_depth(text, r);
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    r.fail("", fmt::format("not valid JSON: {}", e.what()));
  }
  r.object(doc, "");
  auto tok = std::make_unique<HfTokenizer>();
  for (const char* key : {"truncation", "padding"})
    if (const json* v = r.field(doc, key); v && !v->is_null())
      r.fail(std::string("/") + key, "is not supported (must be null)");
  const json* model = r.field(doc, "model");
  if (!model) r.fail("/model", "missing");
  read_model(r, *model, *tok);
  read_added_tokens(r, r.field(doc, "added_tokens"), *tok);

  int max_id = static_cast<int>(tok->bpe.id_to_token.size()) - 1;
  for (const auto& a : tok->added) max_id = std::max(max_id, a->id);
  tok->size = max_id + 1;
  if (tok->size == 0) r.fail("/model/vocab", "the vocabulary is empty");
  tok->added_by_id.assign(tok->size, nullptr);
  for (const auto& a : tok->added) tok->added_by_id[a->id] = a.get();
  for (int id = 0; id < tok->size; ++id)
    if (id >= static_cast<int>(tok->bpe.id_to_token.size()) && !tok->added_by_id[id])
      r.fail("/added_tokens", fmt::format("no token has id {} (ids must have no gaps)", id));

  if (const json* v = r.field(doc, "normalizer"))
    read_normalizer(r, *v, "/normalizer", tok->normalizer);
  if (const json* v = r.field(doc, "pre_tokenizer"))
    read_pre_tokenizer(r, *v, "/pre_tokenizer", tok->pre);
  if (const json* v = r.field(doc, "decoder"); v && !v->is_null()) {
    read_decoder(r, *v, "/decoder", tok->decoder);
    tok->has_decoder = true;
  }
  if (const json* v = r.field(doc, "post_processor"))
    read_post_processor(r, *v, "/post_processor", *tok);

  // Added tokens: normalized ones are matched in normalized text, so their own text is
  // normalized first (the reference does the same).
  // The reference also decodes such a token to its normalized text (measured: "hello world"
  // under Llama 2's normalizer decodes as " hello world").
  for (const auto& a : tok->added) {
    a->text = a->normalized ? normalize(tok->normalizer, a->content) : a->content;
    if (a->normalized) tok->normalized_matcher.add(a->text, a.get());
    else tok->raw_matcher.add(a->content, a.get());
  }

  bool byte_level = false;
  for (const PreStep& s : tok->pre) byte_level = byte_level || s.kind == PreStep::kByteLevel;
  tok->raw_words = !tok->pre.empty() && tok->pre.back().kind == PreStep::kByteLevel;
  if (tok->raw_words || byte_level) tok->bpe.prepare_byte_level();

  tok->description = fmt::format("tokenizer.json BPE, {}{} tokens",
                                 byte_level              ? "byte-level, "
                                 : tok->bpe.byte_fallback ? "byte fallback, "
                                                          : "",
                                 tok->size);
  tok->specials.unk = tok->bpe.unk;
  if (!tok->templates.empty()) {
    bool before = true;
    for (const auto& item : tok->templates.front().single) {
      if (item.is_sequence) {
        before = false;
      } else if (!item.ids.empty()) {
        if (before && !tok->specials.bos) tok->specials.bos = item.ids.front();
        if (!before && !tok->specials.eos) tok->specials.eos = item.ids.front();
      }
    }
  }
  return tok;
}

}  // namespace

}  // namespace text::hf

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(std::string_view text, const std::string& name) {
  return text::hf::load_tokenizer_json(text, name);
}

}  // namespace normlab
