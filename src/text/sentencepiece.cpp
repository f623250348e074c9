// SentencePiece .model files through libsentencepiece (the library the format was made for):
// encoding, both decodes, piece <-> id, and the facts `info` prints (model type, byte fallback),
// read from the serialized ModelProto with a small protobuf walk because Debian's package ships
// no generated proto header.
#include <sentencepiece_processor.h>

#include <cstdint>

#include <fmt/format.h>

#include "normlab/errors.h"
#include "normlab/tokenizer.h"
#include "text/utf8.h"

namespace normlab {
namespace {

// Protobuf wire format, just enough to find a few scalar fields (ModelProto: 2 trainer_spec,
// 5 denormalizer_spec; TrainerSpec: 3 model_type; NormalizerSpec: 2 precompiled_charsmap,
// 4 normalization_rule_tsv). Returns false on malformed input rather than reading past the end.
struct ProtoField {
  std::uint32_t number = 0;
  int wire = 0;
  std::uint64_t varint = 0;
  std::string_view bytes;
};

bool read_varint(std::string_view s, std::size_t& i, std::uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && i < s.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(s[i++]);
    v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Calls f(field) for each top-level field of message `s`; false when `s` is not well formed.
template <class F>
bool for_each_field(std::string_view s, F&& f) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::uint64_t key = 0;
    if (!read_varint(s, i, key)) return false;
    ProtoField field;
    field.number = static_cast<std::uint32_t>(key >> 3);
    field.wire = static_cast<int>(key & 7);
    switch (field.wire) {
      case 0:
        if (!read_varint(s, i, field.varint)) return false;
        break;
      case 1:
        if (s.size() - i < 8) return false;
        i += 8;
        break;
      case 2: {
        std::uint64_t n = 0;
        if (!read_varint(s, i, n) || n > s.size() - i) return false;
        field.bytes = s.substr(i, n);
        i += n;
        break;
      }
      case 5:
        if (s.size() - i < 4) return false;
        i += 4;
        break;
      default:
        return false;
    }
    f(field);
  }
  return true;
}

// "<0xAB>" -> 0xAB (the spelling of SentencePiece's byte pieces).
int byte_piece_value(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int v = 0;
  for (int k = 3; k < 5; ++k) {
    const char c = piece[k];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string_view bytes, const std::string& name) : name_(name) {
    // A file that is not a ModelProto at all is refused before the library sees it (its loader
    // logs to stderr and accepts some garbage as an empty model).
    int model_type = 1;  // TrainerSpec's default: UNIGRAM
    bool denormalizer = false;
    const bool ok = for_each_field(bytes, [&](const ProtoField& f) {
      if (f.number == 2 && f.wire == 2)
        for_each_field(f.bytes, [&](const ProtoField& t) {
          if (t.number == 3 && t.wire == 0) model_type = static_cast<int>(t.varint);
        });
      if (f.number == 5 && f.wire == 2)
        for_each_field(f.bytes, [&](const ProtoField& d) {
          if ((d.number == 2 || d.number == 6) && d.wire == 2 && !d.bytes.empty())
            denormalizer = true;
        });
    });
    if (!ok || bytes.empty())
      throw FormatError(fmt::format("[tokenizer] {}: not a SentencePiece model (no valid "
                                    "ModelProto; {} bytes)", name, bytes.size()));
    const auto status = sp_.LoadFromSerializedProto(
        absl::string_view(bytes.data(), bytes.size()));
    if (!status.ok())
      throw FormatError(fmt::format("[tokenizer] {}: not a SentencePiece model: {}", name,
                                    status.ToString()));
    size_ = sp_.GetPieceSize();
    if (size_ <= 0)
      throw FormatError(fmt::format("[tokenizer] {}: SentencePiece model has no pieces", name));
    // decode_bytes rebuilds text from per-piece surfaces, which a denormalizer would rewrite
    // afterwards; refuse rather than decode differently from the library.
    if (denormalizer)
      throw FormatError(fmt::format("[tokenizer] {}: denormalizer_spec: SentencePiece "
                                    "denormalization rules are not supported", name));
    switch (model_type) {
      case 1: type_ = "Unigram"; break;
      case 2: type_ = "BPE"; break;
      case 3: type_ = "word"; break;
      case 4: type_ = "char"; break;
      default: type_ = fmt::format("model type {}", model_type);
    }
    byte_value_.assign(size_, -1);
    for (int id = 0; id < size_; ++id) {
      if (sp_.IsByte(id)) {
        byte_value_[id] = byte_piece_value(sp_.IdToPiece(id));
        NL_CHECK(byte_value_[id] >= 0, "byte piece '{}'", sp_.IdToPiece(id));
        byte_fallback_ = true;
      }
    }
    auto opt = [](int id) { return id >= 0 ? std::optional<int>(id) : std::nullopt; };
    special_ = {opt(sp_.bos_id()), opt(sp_.eos_id()), opt(sp_.pad_id()), opt(sp_.unk_id())};
  }

  int vocab_size() const override { return size_; }

  std::string describe() const override {
    return fmt::format("SentencePiece {}, {} tokens, byte fallback {}", type_, size_,
                       byte_fallback_ ? "yes" : "no");
  }

  // EncodeAsIds is const in the library (the model and normalizer are read-only after loading),
  // so concurrent encodes from encode_batch are safe. add_special prepends BOS when the model
  // has one and never appends EOS, as transformers' Llama and Gemma tokenizers do by default.
  std::vector<int> encode(std::string_view text, bool add_special) const override {
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = text::utf8_sequence(text, i);
      if (!n)
        throw InputError(fmt::format("[tokenizer] {}: input is not valid UTF-8 at byte offset {}",
                                     name_, i));
      i += n;
    }
    std::vector<int> ids;
    if (add_special && special_.bos) ids.push_back(*special_.bos);
    const auto body = sp_.EncodeAsIds(absl::string_view(text.data(), text.size()));
    ids.insert(ids.end(), body.begin(), body.end());
    return ids;
  }

  // The library's decode (control pieces invisible, <unk> as its surface " ⁇ ", the leading
  // space of the first piece dropped under add_dummy_prefix), except that byte pieces give their
  // raw byte where the library would put U+FFFD for an incomplete UTF-8 sequence.
  std::string decode_bytes(std::span<const int> ids, bool skip_special) const override {
    const std::vector<int> kept = checked(ids, skip_special);
    const auto spt = sp_.DecodeIdsAsImmutableProto(kept);
    NL_CHECK(spt.pieces_size() == kept.size(), "decode returned {} pieces for {} ids",
             spt.pieces_size(), kept.size());
    std::string out;
    for (std::size_t k = 0; k < kept.size(); ++k) {
      const int b = byte_value_[kept[k]];
      if (b >= 0) out += static_cast<char>(b);
      else out += spt.pieces(static_cast<int>(k)).surface();
    }
    return out;
  }

  // The text of the Python package's decode (each byte of an invalid UTF-8 sequence becomes
  // U+FFFD, which is not the maximal-subpart rule of decode_bytes + utf8_lossy).
  std::string decode(std::span<const int> ids, bool skip_special) const override {
    return sp_.DecodeIds(checked(ids, skip_special));
  }

  std::optional<int> token_to_id(std::string_view token) const override {
    const int id = sp_.PieceToId(absl::string_view(token.data(), token.size()));
    // PieceToId answers unk_id for a piece it does not know.
    if (id < 0 || id >= size_) return std::nullopt;
    if (sp_.IsUnknown(id) && sp_.IdToPiece(id) != token) return std::nullopt;
    return id;
  }

  std::string id_to_token(int id) const override {
    if (id < 0 || id >= size_)
      throw InputError(fmt::format("[tokenizer] {}: token id {} is outside [0, {})", name_, id,
                                   size_));
    return sp_.IdToPiece(id);
  }

  // The bytes of running text each piece stands for: a byte piece one, "▁" one (a space; the
  // decoder drops it only at the start of a text, where add_dummy_prefix put it), special pieces
  // none. decode_bytes of a lone "▁the" gives 3 bytes, which would undercount bits per byte.
  std::vector<int> token_byte_lengths() const override {
    static constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581
    std::vector<int> len(size_);
    for (int id = 0; id < size_; ++id) {
      if (is_special(id)) continue;
      if (byte_value_[id] >= 0) {
        len[id] = 1;
        continue;
      }
      const std::string& p = sp_.IdToPiece(id);
      int n = 0;
      for (std::size_t i = 0; i < p.size();) {
        if (std::string_view(p).substr(i, 3) == kSpace) ++n, i += 3;
        else ++n, ++i;
      }
      len[id] = n;
    }
    return len;
  }

  SpecialTokens special() const override { return special_; }
  // The library's byte pieces (IsByte), not any piece spelled like one.
  bool is_byte_fallback(int id) const override {
    return id >= 0 && id < size_ && byte_value_[id] >= 0;
  }
  // Control pieces (<s>, </s>, <pad>) decode to nothing; <unk> is special as in transformers'
  // all_special_ids, so skip_special drops it too.
  bool is_special(int id) const override {
    return id >= 0 && id < size_ && (sp_.IsControl(id) || sp_.IsUnknown(id));
  }

 private:
  std::vector<int> checked(std::span<const int> ids, bool skip_special) const {
    std::vector<int> kept;
    kept.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const int id = ids[i];
      if (id < 0 || id >= size_)
        throw InputError(fmt::format("[tokenizer] {}: token {} at index {} is outside [0, {})",
                                     name_, id, i, size_));
      if (skip_special && is_special(id)) continue;
      kept.push_back(id);
    }
    return kept;
  }

  std::string name_;
  sentencepiece::SentencePieceProcessor sp_;
  int size_ = 0;
  std::string type_;
  bool byte_fallback_ = false;
  std::vector<int> byte_value_;  // (V) the byte a byte piece stands for, -1 for other pieces
  SpecialTokens special_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(std::string_view bytes, const std::string& name) {
  return std::make_unique<SentencePieceTokenizer>(bytes, name);
}

}  // namespace normlab
