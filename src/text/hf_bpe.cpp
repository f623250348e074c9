// The BPE model of tokenizer.json: reading /model (vocabulary, merges, unk_token and the flags),
// the byte tables of the byte-level and byte-fallback families, and tokenizing one word: initial
// symbols, then merges by rank, behind the per-word cache.
#include "text/hf_bpe.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "text/hf_tokenizer_detail.h"
#include "text/hf_unicode.h"
#include "text/utf8.h"

namespace normlab::text::hf {

namespace {

struct QueuedMerge {
  int rank, pos, new_id;
  // std::priority_queue is a max-heap: the "largest" is the lowest rank, then the lowest pos.
  bool operator<(const QueuedMerge& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

void Bpe::prepare_byte_level() {
  const auto& m = byte_level_map();
  raw_ready = true;
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(m.byte_to_utf8[b]);
    byte_symbol[b] = it == vocab.end() ? -1 : it->second;
    if (byte_symbol[b] < 0) raw_ready = false;
  }
  for (const auto& [tok, id] : vocab)
    if (auto bytes = byte_level_decode(tok)) raw_vocab.emplace(std::move(*bytes), id);
}

void Bpe::prepare_byte_fallback() {
  for (int b = 0; b < 256; ++b) {
    const auto it = vocab.find(fmt::format("<0x{:02X}>", b));
    byte_token[b] = it == vocab.end() ? -1 : it->second;
  }
}

void Bpe::tokenize(std::string_view word, bool raw, std::vector<int>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const Vocab& v = raw ? raw_vocab : vocab;
    if (const auto it = v.find(word); it != v.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() < kCacheWordMax;
  const std::size_t h = cacheable ? StringHash{}(word) : 0;
  if (cacheable && cache_.get(word, h, out)) return;
  const std::size_t first = out.size();
  if (raw && raw_ready) {
    thread_local std::vector<Symbol> syms;
    syms.clear();
    for (const char c : word) add_symbol(syms, byte_symbol[static_cast<unsigned char>(c)], 1);
    merge_all(syms, out);
  } else if (raw) {
    merge_word(byte_level_encode(word), out);
  } else {
    merge_word(word, out);
  }
  if (cacheable) cache_.put(word, h, std::span<const int>(out).subspan(first));
}

void Bpe::add_symbol(std::vector<Symbol>& syms, int id, int len) {
  const int n = static_cast<int>(syms.size());
  syms.push_back({id, n - 1, n + 1, len});
}

// Characters -> initial symbols (vocab hit, else byte fallback, else unk), then merges.
void Bpe::merge_word(std::string_view w, std::vector<int>& out) const {
  thread_local std::vector<Symbol> syms;
  syms.clear();
  int unk_id = -1, unk_len = 0;  // a pending unk symbol (unk_id >= 0) and its byte length
  for (std::size_t i = 0; i < w.size();) {
    std::size_t bad = 0;
    std::size_t n = text::utf8_sequence(w, i, &bad);
    if (!n) n = bad;
    const std::string_view ch = w.substr(i, n);
    i += n;
    if (const auto it = vocab.find(ch); it != vocab.end()) {
      if (unk_id >= 0) add_symbol(syms, unk_id, unk_len);
      unk_id = -1;
      add_symbol(syms, it->second, static_cast<int>(n));
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (const char c : ch) all = all && byte_token[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        // As the reference: a pending unk is not flushed before the byte tokens.
        for (const char c : ch) add_symbol(syms, byte_token[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk) {
      if (unk_id >= 0 && fuse_unk) {
        unk_len += static_cast<int>(n);
      } else {
        if (unk_id >= 0) add_symbol(syms, unk_id, unk_len);
        unk_id = *unk;
        unk_len = static_cast<int>(n);
      }
    }
  }
  if (unk_id >= 0) add_symbol(syms, unk_id, unk_len);
  merge_all(syms, out);
}

// The reference's Word::merge_all: a heap of candidate merges by (rank, position); entries
// made stale by an earlier merge are recognised by their pair no longer giving new_id.
void Bpe::merge_all(std::vector<Symbol>& syms, std::vector<int>& out) const {
  if (!syms.empty()) syms.back().next = -1;
  const int n = static_cast<int>(syms.size());
  thread_local std::vector<QueuedMerge> heap;
  heap.clear();
  const auto less = [](const QueuedMerge& a, const QueuedMerge& b) { return a < b; };
  for (int i = 0; i + 1 < n; ++i) {
    const auto it = merges.find(pair_key(syms[i].id, syms[i + 1].id));
    if (it != merges.end()) heap.push_back({it->second.rank, i, it->second.new_id});
  }
  std::make_heap(heap.begin(), heap.end(), less);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), less);
    const QueuedMerge top = heap.back();
    heap.pop_back();
    Symbol& cur = syms[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int next_pos = cur.next;
    const Symbol right = syms[next_pos];
    const auto it = merges.find(pair_key(cur.id, right.id));
    if (it == merges.end() || it->second.new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    syms[next_pos].len = 0;
    if (right.next >= 0 && right.next < n) syms[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      const auto p = merges.find(pair_key(syms[cur.prev].id, cur.id));
      if (p != merges.end()) {
        heap.push_back({p->second.rank, cur.prev, p->second.new_id});
        std::push_heap(heap.begin(), heap.end(), less);
      }
    }
    if (cur.next >= 0 && cur.next < n) {
      const auto q = merges.find(pair_key(cur.id, syms[cur.next].id));
      if (q != merges.end()) {
        heap.push_back({q->second.rank, top.pos, q->second.new_id});
        std::push_heap(heap.begin(), heap.end(), less);
      }
    }
  }
  for (const Symbol& s : syms)
    if (s.len != 0) out.push_back(s.id);
}

// --- Loading: /model ---------------------------------------------------------------------------

void read_model(const Reader& r, const json& m, HfTokenizer& tok) {
  const std::string path = "/model";
  r.object(m, path);
  const auto type = r.opt_string(m, path, "type");
  if (type && *type != "BPE") r.unsupported(path, *type, "BPE");
  if (!type && !r.field(m, "merges"))
    r.fail(path, "no \"type\" and no \"merges\": only BPE models are supported");
  if (const json* d = r.field(m, "dropout"); d && !d->is_null()) {
    if (!d->is_number() || d->get<double>() != 0.0)
      r.fail(path + "/dropout", "BPE dropout is not supported (must be null or 0)");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto s = r.opt_string(m, path, key); s && !s->empty())
      r.fail(path + "/" + key, fmt::format("\"{}\" is not supported (must be null)", *s));
  Bpe& bpe = tok.bpe;
  bpe.fuse_unk = r.boolean(m, path, "fuse_unk", false);
  bpe.byte_fallback = r.boolean(m, path, "byte_fallback", false);
  bpe.ignore_merges = r.boolean(m, path, "ignore_merges", false);

  const json* vocab = r.field(m, "vocab");
  if (!vocab || !vocab->is_object()) r.fail(path + "/vocab", "expected an object of token: id");
  if (vocab->size() > kMaxVocab)
    r.fail(path + "/vocab", fmt::format("{} entries is more than the {} supported", vocab->size(),
                                        kMaxVocab));
  const std::size_t n = vocab->size();
  bpe.id_to_token.assign(n, {});
  std::vector<bool> seen(n, false);
  bpe.vocab.reserve(n);
  for (const auto& [token, idv] : vocab->items()) {
    const std::string p = path + "/vocab/" + token;
    if (!idv.is_number_integer()) r.fail(p, "expected an integer id");
    const std::int64_t id = idv.is_number_unsigned()
                                ? static_cast<std::int64_t>(std::min<std::uint64_t>(
                                      idv.get<std::uint64_t>(), std::uint64_t{1} << 62))
                                : idv.get<std::int64_t>();
    if (id < 0 || static_cast<std::uint64_t>(id) >= n)
      r.fail(p, fmt::format("id {} is outside [0, {}): ids must be 0..{} without gaps", id, n,
                            n == 0 ? 0 : n - 1));
    if (seen[id])
      r.fail(p, fmt::format("id {} is given twice (also \"{}\")", id, bpe.id_to_token[id]));
    if (!text::is_valid_utf8(token)) r.fail(p, "token is not valid UTF-8");
    seen[id] = true;
    bpe.id_to_token[id] = token;
    bpe.vocab.emplace(token, static_cast<int>(id));
  }

  const json* merges = r.field(m, "merges");
  if (!merges || !merges->is_array()) r.fail(path + "/merges", "expected an array");
  bpe.merges.reserve(merges->size());
  const auto id_of = [&](const std::string& s, const std::string& p) {
    const auto it = bpe.vocab.find(s);
    if (it == bpe.vocab.end()) r.fail(p, fmt::format("\"{}\" is not in the vocabulary", s));
    return it->second;
  };
  for (std::size_t i = 0; i < merges->size(); ++i) {
    const json& e = (*merges)[i];
    const std::string p = fmt::format("{}/merges/{}", path, i);
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(p, fmt::format("\"{}\" is not two tokens separated by one space", s));
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      r.fail(p, "expected \"a b\" or [\"a\", \"b\"]");
    }
    const int ia = id_of(a, p), ib = id_of(b, p), inew = id_of(a + b, p);
    // A pair listed twice keeps its last rank, as the reference's map does.
    bpe.merges[pair_key(ia, ib)] = MergeInfo{static_cast<int>(i), inew};
  }
  if (const auto u = r.opt_string(m, path, "unk_token")) {
    const auto it = bpe.vocab.find(*u);
    if (it == bpe.vocab.end())
      r.fail(path + "/unk_token", fmt::format("\"{}\" is not in the vocabulary", *u));
    bpe.unk = it->second;
  }
  if (bpe.byte_fallback) bpe.prepare_byte_fallback();
}

}  // namespace normlab::text::hf
