// train.matmul_precision: bf16 products in the linear layers and the LM head. A tiny model trains
// in bf16 with its loss close to the float32 run's; a model switched back to float32 computes
// float32 bitwise; double models refuse bf16; a bad value is reported by validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>
#include <vector>

#include "fixtures.h"
#include "model/transformer.h"
#include "normlab/config.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"
#include "tensor/gemm_bf16.h"
#include "tensor/rng.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

// The tiny run, wider (C = 64, F = 128) and with SwiGLU.
Config tiny_config(int steps) {
  Config c = test::tiny_run(steps);
  c.model.d_model = 64;
  c.model.d_ff = 128;
  c.model.placement = Placement::pre;
  c.model.mlp = MlpKind::swiglu;
  return c;
}

struct RunLog {
  std::vector<double> losses;
  TrainResult result;
};

RunLog train(const Config& c, const std::string& name) {
  const fs::path dir = test::temp_dir("mp_" + name);
  RunLog r;
  {
    Trainer t(c, dir.string(), false);
    TrainHooks h;
    h.on_log = [&](const StepRecord& s) { r.losses.push_back(s.loss); };
    r.result = t.run(h);
  }
  fs::remove_all(dir);
  return r;
}

// Measured on this model (40 steps, seed 1337, AVX512-BF16 kernel): the loss falls from 5.555 to
// 3.168 in both runs; the bf16 run's per-step loss differs from the float32 run's by 2.3e-4 at
// most (mean 8.8e-5; 6.6e-5 at the last step). The tolerance 2e-3 is about 9x the largest
// difference measured and under 0.1% of the 2.4 nats the loss falls, so a bf16 path that broke
// training (a wrong operand, a lost gradient term) cannot pass; the summation order of the
// portable fallback on other CPUs changes the differences by far less than the margin.
TEST(MatmulPrecision, Bf16TrainsCloseToFloat32) {
  const Config f32 = tiny_config(40);
  Config bf = f32;
  bf.train.matmul_precision = MatmulPrecision::bf16;
  const RunLog a = train(f32, "ref"), b = train(bf, "bf16");
  ASSERT_EQ(b.losses.size(), 40u);
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_FALSE(b.result.diverged);
  EXPECT_GT(b.losses.front(), 5.0);                        // ~ln(256) at init
  EXPECT_LT(b.result.train_loss, b.losses.front() - 1.5);  // it learns
  double worst = 0, sum = 0;
  bool any_different = false;
  for (std::size_t i = 0; i < a.losses.size(); ++i) {
    const double d = std::fabs(a.losses[i] - b.losses[i]);
    worst = std::max(worst, d);
    sum += d;
    any_different = any_different || a.losses[i] != b.losses[i];
  }
  EXPECT_LE(worst, 2e-3) << "mean |difference| " << sum / a.losses.size();
  // The bf16 path is taken: the losses are not bitwise float32's.
  EXPECT_TRUE(any_different);
  EXPECT_NEAR(b.result.train_loss, a.result.train_loss, 2e-3);
}

// One forward with loss and gradients on a fixed model: bf16 against float32. Measured: the loss
// moves by 8.3e-5 (of 5.53), each parameter's gradient by 0.2% to 0.6% of its norm (bf16 keeps 8
// significant bits, relative rounding <= 2^-9 = 0.2% per input). Tolerances: 1e-3 on the loss,
// 2% on each gradient's relative error (norm of the difference over the norm).
TEST(MatmulPrecision, ModelForwardBackwardCloseToFloat32) {
  const Config c = tiny_config(1);
  const int B = 2, T = c.model.seq_len;
  Transformer<float> m32(c.model, B, T), m16(c.model, B, T);
  m32.init_params(5);
  m16.init_params(5);
  m16.set_matmul_precision(GemmPrecision::bf16);
  EXPECT_EQ(m16.matmul_precision(), GemmPrecision::bf16);
  Rng rng(2);
  const std::vector<int> idx = test::random_tokens(B * T, c.model.vocab_size, rng),
                         tgt = test::random_tokens(B * T, c.model.vocab_size, rng);
  m32.zero_grad();
  m16.zero_grad();
  const double l32 = m32.forward(idx.data(), tgt.data(), B, T, 0.0, true).loss;
  const double l16 = m16.forward(idx.data(), tgt.data(), B, T, 0.0, true).loss;
  m32.backward();
  m16.backward();
  EXPECT_NE(l32, l16);
  EXPECT_NEAR(l16, l32, 1e-3);
  for (const ParamSpec& s : m32.table().specs()) {
    const float* g32 = m32.grad(s);
    const float* g16 = m16.grad(s);
    double num = 0, den = 0;
    for (long i = 0; i < s.numel; ++i) {
      num += (g16[i] - g32[i]) * static_cast<double>(g16[i] - g32[i]);
      den += static_cast<double>(g32[i]) * g32[i];
    }
    EXPECT_LE(std::sqrt(num), 0.02 * std::sqrt(den) + 1e-12) << s.name;
  }
}

// The LM head's precision apart from the blocks': each of the four combinations computes its own
// logits (the head's product and the blocks' products both change them), set_matmul_precision
// resets the head, and a head set back to float32 is bitwise float32 again.
TEST(MatmulPrecision, HeadPrecisionApartFromTheBlocks) {
  const Config c = tiny_config(1);
  const int B = 2, T = c.model.seq_len, V = c.model.vocab_size;
  Rng rng(4);
  const std::vector<int> idx = test::random_tokens(B * T, V, rng);
  auto logits = [&](GemmPrecision blocks, GemmPrecision head) {
    Transformer<float> m(c.model, B, T);
    m.init_params(5);
    m.set_matmul_precision(blocks);
    m.set_head_matmul_precision(head);
    EXPECT_EQ(m.matmul_precision(), blocks);
    EXPECT_EQ(m.head_matmul_precision(), head);
    std::vector<float> out(static_cast<std::size_t>(B) * T * V);
    m.forward_logits(idx.data(), B, T, out.data());
    return out;
  };
  const auto f = GemmPrecision::float32, h = GemmPrecision::bf16;
  const auto ff = logits(f, f), fh = logits(f, h), hf = logits(h, f), hh = logits(h, h);
  EXPECT_NE(ff, fh);
  EXPECT_NE(ff, hf);
  EXPECT_NE(fh, hh);
  EXPECT_NE(hf, hh);
  EXPECT_NE(fh, hf);
  Transformer<float> m(c.model, B, T);
  m.set_head_matmul_precision(h);
  m.set_matmul_precision(f);  // sets both
  EXPECT_EQ(m.head_matmul_precision(), f);
  m.init_params(5);
  std::vector<float> back(ff.size());
  m.set_head_matmul_precision(h);
  m.forward_logits(idx.data(), B, T, back.data());
  EXPECT_EQ(back, fh);
  m.set_head_matmul_precision(f);
  m.forward_logits(idx.data(), B, T, back.data());
  EXPECT_EQ(back, ff);
  Transformer<double> d(c.model, B, T);
  EXPECT_THROW(d.set_head_matmul_precision(h), InputError);
}

// A model switched to bf16 and back computes float32 again, bitwise: nothing of the bf16 path
// (packed operands, a sticky flag) leaks into float32 products.
TEST(MatmulPrecision, SwitchingBackToFloat32IsBitwiseFloat32) {
  const Config c = tiny_config(1);
  const int B = 2, T = c.model.seq_len;
  Transformer<float> ref(c.model, B, T), m(c.model, B, T);
  ref.init_params(5);
  m.init_params(5);
  Rng rng(3);
  const std::vector<int> idx = test::random_tokens(B * T, c.model.vocab_size, rng),
                         tgt = test::random_tokens(B * T, c.model.vocab_size, rng);
  auto loss_and_grads = [&](Transformer<float>& t) {
    t.zero_grad();
    const double l = t.forward(idx.data(), tgt.data(), B, T, 1e-4, true).loss;
    t.backward();
    return std::make_pair(l, std::vector<float>(t.grads().begin(), t.grads().end()));
  };
  const auto want = loss_and_grads(ref);
  m.set_matmul_precision(GemmPrecision::bf16);
  const auto bf = loss_and_grads(m);
  EXPECT_NE(bf.first, want.first);  // the bf16 products were used
  m.set_matmul_precision(GemmPrecision::float32);
  const auto back = loss_and_grads(m);
  EXPECT_EQ(back.first, want.first);
  ASSERT_EQ(back.second.size(), want.second.size());
  EXPECT_EQ(0, std::memcmp(back.second.data(), want.second.data(),
                           want.second.size() * sizeof(float)));
}

TEST(MatmulPrecision, DoubleModelRefusesBf16) {
  const Config c = tiny_config(1);
  Transformer<double> m(c.model, 1, 4);
  EXPECT_THROW(m.set_matmul_precision(GemmPrecision::bf16), InputError);
  EXPECT_NO_THROW(m.set_matmul_precision(GemmPrecision::float32));
}

TEST(MatmulPrecision, ConfigNamesAndValidation) {
  EXPECT_EQ(to_string(MatmulPrecision::float32), "float32");
  EXPECT_EQ(to_string(MatmulPrecision::bf16), "bf16");
  EXPECT_EQ(enum_from_string<MatmulPrecision>("bf16"), MatmulPrecision::bf16);
  EXPECT_FALSE(enum_from_string<MatmulPrecision>("fp16").has_value());
  Config c;
  EXPECT_TRUE(validation_errors(c).empty());
  EXPECT_EQ(c.train.matmul_precision, MatmulPrecision::float32);  // the default
  c.train.matmul_precision = static_cast<MatmulPrecision>(5);
  const auto errs = validation_errors(c);
  ASSERT_EQ(errs.size(), 1u);
  EXPECT_EQ(errs[0],
            "train.matmul_precision = 5 is not a valid value (allowed: float32, bf16, auto)");
  EXPECT_EQ(enum_from_string<MatmulPrecision>("auto"), MatmulPrecision::automatic);
  EXPECT_EQ(to_string(MatmulPrecision::automatic), "auto");
}

// "auto" resolves by the CPU: bf16 exactly where the AVX512-BF16 kernel runs; explicit values are
// kept. The trainer reports what it resolved to, and a run with auto trains bitwise like a run
// with the resolved value written out.
TEST(MatmulPrecision, AutoResolvesByTheCpu) {
  const MatmulPrecision expect = bf16_hardware() ? MatmulPrecision::bf16 : MatmulPrecision::float32;
  EXPECT_EQ(resolve_matmul_precision(MatmulPrecision::automatic), expect);
  EXPECT_EQ(resolve_matmul_precision(MatmulPrecision::float32), MatmulPrecision::float32);
  EXPECT_EQ(resolve_matmul_precision(MatmulPrecision::bf16), MatmulPrecision::bf16);
  Config a = tiny_config(6), r = tiny_config(6);
  a.train.matmul_precision = MatmulPrecision::automatic;
  r.train.matmul_precision = expect;
  {
    const fs::path dir = test::temp_dir("mp_auto_trainer");
    Trainer t(a, dir.string(), false);
    EXPECT_EQ(t.matmul_precision(), expect);
    fs::remove_all(dir);
  }
  const RunLog ra = train(a, "auto"), rr = train(r, "resolved");
  ASSERT_EQ(ra.losses.size(), rr.losses.size());
  for (std::size_t i = 0; i < ra.losses.size(); ++i) EXPECT_EQ(ra.losses[i], rr.losses[i]) << i;
}

}  // namespace
}  // namespace normlab
