// The LM head runs over the (N, V) logits in chunks of rows (kHeadChunkValues / V rows, at least
// kHeadChunkMinRows). The tiny test models fit in one chunk, so here the chunk is forced small
// (set_head_chunk) and the loss, its parts, the head statistics and every gradient must match the
// single-chunk pass, over 2+ chunks with a ragged last one, with and without the final soft-cap
// and z-loss, tied and untied, in float and double. A wrong row offset for the second chunk
// (`xf` for `xf + r0 * C`) passed every test before these.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "fixtures.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

// Relative tolerance against the single-chunk pass: the chunked pass sums the head gradient
// (dW = sum over rows of dlogits^T x) and the loss in another association, which moves float
// results by a few ulps of the sums, double ones by ~1e-16.
template <class T>
constexpr double kRel = std::is_same_v<T, float> ? 1e-5 : 1e-12;

struct HeadCase {
  double final_cap, z;
  bool tie;
};

void PrintTo(const HeadCase& c, std::ostream* os) {
  *os << "final_softcap=" << c.final_cap << " z_loss=" << c.z << " tie=" << c.tie;
}

ModelConfig head_model(const HeadCase& hc) {
  ModelConfig m = test::tiny_model();
  m.final_softcap = hc.final_cap;
  m.tie_embeddings = hc.tie;
  return m;
}

// max |a - b| over max(max |a|, 1e-30): the error of b relative to a tensor's scale.
template <class T>
double rel_err(const T* a, const T* b, long n) {
  double diff = 0, scale = 0;
  for (long i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    diff = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(diff, d);
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
  }
  return diff / std::max(scale, 1e-30);
}

double rel_err(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(a), 1e-30); }

template <class T>
void expect_chunks_match_single(const HeadCase& hc) {
  const ModelConfig m = head_model(hc);
  const int B = 3, Tn = 7;  // N = 21 rows
  Transformer<T> one(m, B, Tn);
  ASSERT_EQ(one.head_chunk(), B * Tn) << "the reference must be a single chunk";
  one.init_params(11);
  Rng rng(12);
  test::perturb(one.params(), rng, 0.3);
  const std::vector<int> idx = test::random_tokens(B * Tn, m.vocab_size, rng),
                         tgt = test::random_tokens(B * Tn, m.vocab_size, rng);
  one.set_collect_stats(true);
  one.zero_grad();
  const LossStats ref = one.forward(idx.data(), tgt.data(), B, Tn, hc.z, true);
  one.backward();
  const ForwardStats ref_stats = one.stats();

  // 21 rows as 1 x 21, 5+5+5+5+1, 8+8+5, 20+1 (ragged last chunks) and 1 per chunk.
  for (int rows : {5, 8, 20, 1}) {
    SCOPED_TRACE("chunk rows " + std::to_string(rows));
    Transformer<T> many(m, B, Tn);
    std::copy(one.params().begin(), one.params().end(), many.params().begin());
    many.set_head_chunk(rows);
    ASSERT_EQ(many.head_chunk(), rows);
    many.set_collect_stats(true);
    many.zero_grad();
    const LossStats got = many.forward(idx.data(), tgt.data(), B, Tn, hc.z, true);
    many.backward();
    EXPECT_EQ(got.tokens, ref.tokens);
    EXPECT_LT(rel_err(ref.loss, got.loss), kRel<T>) << ref.loss << " vs " << got.loss;
    EXPECT_LT(rel_err(ref.ce, got.ce), kRel<T>);
    if (hc.z > 0) {
      EXPECT_LT(rel_err(ref.z_loss, got.z_loss), kRel<T>);
    }
    EXPECT_LT(rel_err(ref.lse_mean, got.lse_mean), kRel<T>);
    const ForwardStats& st = many.stats();
    EXPECT_LT(rel_err(ref_stats.log_z_mean, st.log_z_mean), kRel<T>);
    EXPECT_LT(rel_err(ref_stats.log_z_std, st.log_z_std), kRel<T>);
    EXPECT_LT(rel_err(ref_stats.log_z_max, st.log_z_max), kRel<T>);
    EXPECT_LT(rel_err(ref_stats.max_logit, st.max_logit), kRel<T>);
    EXPECT_LT(rel_err(ref_stats.max_logit_raw, st.max_logit_raw), kRel<T>);
    for (const ParamSpec& s : one.table().specs())
      EXPECT_LT(rel_err(one.grads().data() + s.offset, many.grads().data() + s.offset, s.numel),
                kRel<T>)
          << s.name;
    // The loss alone (no gradient) takes the same chunks.
    const LossStats fwd = many.forward(idx.data(), tgt.data(), B, Tn, hc.z, false);
    EXPECT_LT(rel_err(ref.loss, fwd.loss), kRel<T>);
  }
}

class HeadChunks : public ::testing::TestWithParam<HeadCase> {};

TEST_P(HeadChunks, FloatMatchesSingleChunk) { expect_chunks_match_single<float>(GetParam()); }
TEST_P(HeadChunks, DoubleMatchesSingleChunk) { expect_chunks_match_single<double>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Options, HeadChunks,
                         ::testing::Values(HeadCase{0.0, 0.0, true}, HeadCase{1.5, 0.0, false},
                                           HeadCase{0.0, 1e-2, false}, HeadCase{1.5, 1e-2, true}),
                         [](const auto& info) {
                           const HeadCase& c = info.param;
                           return std::string(c.final_cap > 0 ? "cap" : "nocap") +
                                  (c.z > 0 ? "_zloss" : "_nozloss") + (c.tie ? "_tied" : "_untied");
                         });

TEST(HeadChunks, DefaultSizeFollowsTheValueCap) {
  // kHeadChunkValues / V rows, at least kHeadChunkMinRows, at most N.
  EXPECT_EQ(head_chunk_rows(21, 32), 21);
  EXPECT_EQ(head_chunk_rows(1L << 20, 50257), kHeadChunkValues / 50257);
  EXPECT_EQ(head_chunk_rows(1L << 20, 1 << 20), kHeadChunkMinRows);
  EXPECT_EQ(head_chunk_rows(1L << 20, 256), kHeadChunkValues / 256);
  EXPECT_EQ(kHeadChunkValues, 1L << 24);
}

TEST(HeadChunks, RefusesAChunkLargerThanItsBuffers) {
  Transformer<float> model(head_model({0.0, 0.0, true}), 2, 8);
  EXPECT_EQ(model.head_chunk(), 16);
  EXPECT_THROW(model.set_head_chunk(17), InternalError);
  EXPECT_THROW(model.set_head_chunk(0), InternalError);
  model.set_head_chunk(16);
  EXPECT_EQ(model.head_chunk(), 16);
}

}  // namespace
}  // namespace normlab
