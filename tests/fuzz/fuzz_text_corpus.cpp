// Fuzz target: the byte tokenizer and the text corpus loader on arbitrary bytes, then the batch
// samplers over whatever corpus was accepted.
//
// Properties: ByteTokenizer::decode_bytes(encode(x)) == x for every byte string, every token in
// [0, 256); decode_bytes refuses a token outside [0, 256) with InputError. TokenCorpus::from_text either
// throws normlab::Error or holds exactly the input bytes. For an accepted corpus, split() either
// throws normlab::Error or gives two contiguous parts that cover it; BatchSampler and EvalBatches
// (sizes taken from the input's last bytes) either refuse with normlab::Error or fill every row
// with a window of the corpus and its targets shifted by one.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.h"
#include "normlab/data.h"

using namespace normlab;

namespace {

// Row r of (idx, targets) is the window of `view` at some offset o: idx = view[o, o + T),
// targets = view[o + 1, o + T + 1).
void check_rows(const CorpusView& view, const std::vector<int>& idx,
                const std::vector<int>& targets, int rows, int T) {
  std::vector<int> all(static_cast<std::size_t>(view.size()));
  view.copy(0, view.size(), all.data());
  for (int r = 0; r < rows; ++r) {
    const int* x = idx.data() + static_cast<std::size_t>(r) * T;
    const int* y = targets.data() + static_cast<std::size_t>(r) * T;
    for (int t = 0; t + 1 < T; ++t) FUZZ_CHECK(y[t] == x[t + 1]);
    // Find the window: it must exist somewhere in the view.
    bool found = false;
    for (long o = 0; o + T < view.size() && !found; ++o)
      found = std::equal(x, x + T, all.data() + o) && y[T - 1] == all[o + T];
    FUZZ_CHECK(found);
  }
}

void sample(const TokenCorpus& corpus, std::uint8_t p0, std::uint8_t p1, std::uint8_t p2) {
  const double val_fraction = (p0 % 100) / 100.0;  // 0 is refused, the rest may be
  const int T = 1 + p1 % 16;
  const int world = 1 + (p2 >> 6);
  const int B = world * (1 + (p2 & 3));
  const int rank = p2 % world;
  std::optional<CorpusSplit> split;
  if (!accepts([&] { split.emplace(corpus.split(val_fraction, T)); })) return;
  FUZZ_CHECK(split->train.begin() == 0 && split->train.size() == split->validation.begin());
  FUZZ_CHECK(split->validation.begin() + split->validation.size() == corpus.size());

  const int rows = B / world;
  std::vector<int> idx(static_cast<std::size_t>(rows) * T), targets(idx.size());
  std::optional<BatchSampler> sampler;
  if (accepts([&] { sampler.emplace(split->train, B, T, p0 ^ p1, rank, world); })) {
    FUZZ_CHECK(sampler->local_batch() == rows);
    for (int k = 0; k < 2; ++k) {
      sampler->next(idx.data(), targets.data());
      check_rows(split->train, idx, targets, rows, T);
    }
  }
  std::optional<EvalBatches> eval;
  if (accepts([&] { eval.emplace(split->validation, B, T, 1 + p0 % 3, rank, world); })) {
    int batches = 0;
    while (eval->next(idx.data(), targets.data())) {
      check_rows(split->validation, idx, targets, rows, T);
      ++batches;
    }
    FUZZ_CHECK(batches == eval->num_batches());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  const ByteTokenizer tok;
  const std::vector<int> tokens = tok.encode(text);
  FUZZ_CHECK(tokens.size() == size);
  for (const int t : tokens) FUZZ_CHECK(t >= 0 && t < tok.vocab_size());
  FUZZ_CHECK(tok.decode_bytes(tokens) == text);
  if (size > 0) {  // one token pushed out of range must be refused
    std::vector<int> bad = tokens;
    bad[data[0] % size] = (data[0] & 1) ? 256 + data[0] : -1 - data[0];
    FUZZ_CHECK(!accepts([&] { (void)tok.decode_bytes(bad); }));
  }

  std::optional<TokenCorpus> corpus;
  if (!accepts([&] { corpus.emplace(TokenCorpus::from_text(text, "fuzz")); })) return 0;
  FUZZ_CHECK(corpus->size() == static_cast<long>(size) && corpus->vocab_size() == 256);
  std::vector<int> back(size);
  corpus->copy(0, corpus->size(), back.data());
  FUZZ_CHECK(back == tokens);
  for (std::size_t i = 0; i < size; ++i) FUZZ_CHECK(corpus->token(static_cast<long>(i)) == tokens[i]);

  // The last three bytes pick the split and batch sizes, so the fuzzer can steer them.
  if (size >= 3) sample(*corpus, data[size - 1], data[size - 2], data[size - 3]);
  return 0;
}
