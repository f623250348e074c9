// zero_grad() is lazy (model/transformer.h): a gradient is zero-filled when something first
// accumulates into it or grads() is read, and the first matrix product into a weight gradient
// overwrites it. What a caller sees must be exactly what an explicit fill of zeros gives: the
// same gradients, value for value, after one or several backward passes (micro-batches), whatever
// was in the arena before, read before or after backward(), for tied and untied heads, several
// head chunks, biases, Peri-Norm and QK-Norm, in float (float32 and bf16 products) and double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

#include "fixtures.h"
#include "model/transformer.h"
#include "tensor/gemm_bf16.h"
#include "tensor/rng.h"

namespace normlab {
namespace {

struct ZeroCase {
  bool tie, bias, peri_swiglu_qk;
  int head_chunk;  // 0: the default (one chunk)
  bool bf16;
};

void PrintTo(const ZeroCase& c, std::ostream* os) {
  *os << "tie=" << c.tie << " bias=" << c.bias << " peri_swiglu_qk=" << c.peri_swiglu_qk
      << " head_chunk=" << c.head_chunk << " bf16=" << c.bf16;
}

ModelConfig zero_model(const ZeroCase& zc) {
  ModelConfig m = test::tiny_model();
  m.tie_embeddings = zc.tie;
  m.bias = zc.bias;
  if (zc.peri_swiglu_qk) {
    m.placement = Placement::peri;
    m.norm = NormKind::rmsnorm;
    m.mlp = MlpKind::swiglu;
    m.qk_norm = QKNormKind::rmsnorm;
  }
  return m;
}

constexpr int kB = 2, kT = 8;

template <class T>
struct Pair {
  Transformer<T> eager, lazy;
  std::vector<std::vector<int>> idx, tgt;  // per micro-batch
  Pair(const ZeroCase& zc, int micro)
      : eager(zero_model(zc), kB, kT), lazy(zero_model(zc), kB, kT) {
    Rng rng(5);
    for (Transformer<T>* m : {&eager, &lazy}) {
      m->init_params(17);
      if (zc.head_chunk > 0) m->set_head_chunk(zc.head_chunk);
      if constexpr (std::is_same_v<T, float>)
        if (zc.bf16) m->set_matmul_precision(GemmPrecision::bf16);
    }
    Rng pr(9);
    test::perturb(eager.params(), pr, 0.05);
    std::copy(eager.params().begin(), eager.params().end(), lazy.params().begin());
    const int V = eager.config().vocab_size;
    for (int a = 0; a < micro + 1; ++a) {
      idx.push_back(test::random_tokens(kB * kT, V, rng));
      tgt.push_back(test::random_tokens(kB * kT, V, rng));
    }
  }
  void step(Transformer<T>& m, int a) {
    m.forward(idx[a].data(), tgt[a].data(), kB, kT, 1e-3, true, 1.0);
    m.backward();
  }
};

// Compares value for value (== : zeros of either sign are equal).
template <class T>
void expect_same_grads(Transformer<T>& eager, Transformer<T>& lazy, const char* what) {
  const auto ge = eager.grads();
  const auto gl = lazy.grads();
  ASSERT_EQ(ge.size(), gl.size());
  for (const ParamSpec& s : eager.table().specs()) {
    long bad = 0;
    for (long i = s.offset; i < s.offset + s.numel; ++i)
      if (!(ge[i] == gl[i]) && bad++ < 2)
        ADD_FAILURE() << what << ": " << s.name << "[" << i - s.offset << "] = " << gl[i]
                      << " lazily, " << ge[i] << " after an explicit fill";
  }
}

class LazyZeroGrad : public ::testing::TestWithParam<ZeroCase> {};

template <class T>
void run_case(const ZeroCase& zc) {
  for (int micro : {1, 2}) {
    Pair<T> p(zc, micro);
    // Stale gradients from an earlier step, different in the two models.
    p.step(p.eager, micro);
    p.step(p.lazy, micro);
    p.step(p.lazy, micro);
    p.eager.zero_grad();
    auto g = p.eager.grads();
    std::fill(g.begin(), g.end(), T(0));  // the explicit fill the lazy model skips
    p.lazy.zero_grad();
    for (int a = 0; a < micro; ++a) {
      p.step(p.eager, a);
      p.step(p.lazy, a);
    }
    expect_same_grads(p.eager, p.lazy, micro == 1 ? "one backward" : "two micro-batches");
  }
}

TEST_P(LazyZeroGrad, SameGradientsAsAnExplicitFill) {
  if (GetParam().bf16)
    run_case<float>(GetParam());
  else {
    run_case<float>(GetParam());
    run_case<double>(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LazyZeroGrad,
                         ::testing::Values(ZeroCase{true, false, false, 0, false},
                                           ZeroCase{false, true, false, 0, false},
                                           ZeroCase{true, true, false, 5, false},
                                           ZeroCase{false, false, true, 5, false},
                                           ZeroCase{true, false, true, 0, true},
                                           ZeroCase{false, true, true, 5, true}));

// After zero_grad() every gradient reads zero, though the arena held a step's gradients; a
// gradient read between forward (the head's part) and backward is the head's part alone, and
// the backward then adds the body's to it as after an explicit fill.
TEST(LazyZeroGrad, ReadsZeroAndReadsBetweenForwardAndBackward) {
  const ZeroCase zc{false, true, true, 3, false};
  Pair<float> p(zc, 1);
  p.step(p.lazy, 1);
  p.lazy.zero_grad();
  for (float v : p.lazy.grads()) ASSERT_EQ(v, 0.f);
  for (const ParamSpec& s : p.lazy.table().specs()) ASSERT_EQ(*p.lazy.grad(s), 0.f) << s.name;

  p.step(p.eager, 1);
  p.eager.zero_grad();
  p.lazy.zero_grad();
  p.eager.forward(p.idx[0].data(), p.tgt[0].data(), kB, kT, 1e-3, true, 1.0);
  p.lazy.forward(p.idx[0].data(), p.tgt[0].data(), kB, kT, 1e-3, true, 1.0);
  expect_same_grads(p.eager, p.lazy, "after the forward");  // both settle here
  const ParamSpec* head = p.lazy.table().find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  const ParamSpec* emb = p.lazy.table().find("tok_emb.weight");
  ASSERT_NE(emb, nullptr);
  const auto g = p.lazy.grads();
  float head_max = 0;
  for (long i = head->offset; i < head->offset + head->numel; ++i)
    head_max = std::max(head_max, std::fabs(g[i]));
  EXPECT_GT(head_max, 0.f);
  for (long i = emb->offset; i < emb->offset + emb->numel; ++i) ASSERT_EQ(g[i], 0.f);
  p.eager.backward();
  p.lazy.backward();
  expect_same_grads(p.eager, p.lazy, "after the backward");
}

}  // namespace
}  // namespace normlab
