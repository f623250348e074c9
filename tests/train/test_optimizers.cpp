// The optimizers behind one interface (train/optimizer.h, #36) in training: every optimizer, with
// and without QK-Clip, resumes bitwise from its checkpoint; a resume that names another optimizer
// is refused by name; QK-Clip brings a head's largest logit to tau with the same inputs (the
// stated rules for grouped keys and QK-Norm); the registry covers every optim.name.
// (Step-for-step parity with the reference packages: tests/py/test_optimizer_parity.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "fixtures.h"
#include "io/metrics.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/checkpoint.h"
#include "normlab/errors.h"
#include "normlab/safetensors.h"
#include "normlab/trainer.h"
#include "tensor/rng.h"
#include "tensor/threading.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/qk_clip.h"

namespace fs = std::filesystem;

namespace normlab {
namespace {

Config run_with(OptimizerKind k, double qk_clip, int steps) {
  Config c = test::tiny_run(steps);
  c.optim.schedule = ScheduleKind::constant;
  c.optim.name = k;
  c.optim.qk_clip = qk_clip;
  c.model.n_head = 4;
  c.model.n_kv_head = 2;
  // SOAP refreshes its eigenbases every 3 updates (steps 4, 7, 10): a run interrupted at step 7
  // resumes from a checkpoint written right after one, with more to come.
  set_key(c, "optim.soap.precondition_frequency", "3");
  return c;
}

// The training loss of every step record of a run's metrics.jsonl.
std::vector<double> losses(const std::string& dir) {
  std::vector<double> out;
  for (const auto& j : read_metrics(dir))
    if (!j.contains("event") && j.contains("loss")) out.push_back(j["loss"].get<double>());
  return out;
}

std::vector<std::vector<float>> state_of(const Trainer& t) {
  std::vector<std::vector<float>> out{{t.params().begin(), t.params().end()}};
  for (const auto& [name, s] : t.optimizer_state()) out.emplace_back(s.begin(), s.end());
  return out;
}

class EveryOptimizer : public ::testing::TestWithParam<std::pair<OptimizerKind, double>> {};

// A fresh optimizer loaded from `ckpt` has taken `steps` and holds, arena by arena, the state
// the trainer held when it saved (`saved`: state_of(), the parameters first).
void expect_state_reloads(const std::string& ckpt, Transformer<float>& model, const Config& c,
                          long steps, const std::vector<std::vector<float>>& saved) {
  const auto opt = make_optimizer<float>(model.table(), c.optim, c.model);
  load_checkpoint(ckpt, model, opt.get(), nullptr);
  EXPECT_EQ(opt->steps_taken(), steps);
  const auto arenas = std::as_const(*opt).state();
  ASSERT_EQ(arenas.size() + 1, saved.size());
  for (std::size_t k = 0; k < arenas.size(); ++k)
    EXPECT_TRUE(arenas[k]->data == saved[k + 1]) << arenas[k]->prefix;
}

TEST_P(EveryOptimizer, ResumesBitwise) {
  const auto [kind, clip] = GetParam();
  const std::string name = std::string(to_string(kind)) + (clip > 0 ? "_clip" : "");
  const std::string a = test::temp_dir("optim_straight_" + name), b = test::temp_dir("optim_resumed_" + name);
  std::vector<std::vector<float>> straight;
  std::vector<std::string> prefixes;
  {
    Trainer t(run_with(kind, clip, 12), a, false);
    EXPECT_EQ(t.run().steps, 12);
    straight = state_of(t);
    for (const auto& [p, s] : t.optimizer_state()) prefixes.push_back(p);
  }
  {
    Trainer t(run_with(kind, clip, 7), b, false);
    t.run();
  }
  {
    ResumeOptions from;
    from.config = resume_config(resume_point(b), {"train.steps=12"});
    Trainer t(Config{}, b, true, from);
    EXPECT_EQ(t.step(), 7);
    t.run();
    const auto resumed = state_of(t);
    ASSERT_EQ(resumed.size(), straight.size());
    for (std::size_t k = 0; k < resumed.size(); ++k)
      EXPECT_TRUE(resumed[k] == straight[k]) << name << " arena " << k;
  }
  // and the resumed run's metrics read as the straight run's, step for step
  const std::vector<double> la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), 12u) << name;
  EXPECT_TRUE(la == lb) << name;
  // The state names are the optimizer's own (nothing shared by accident between optimizers).
  const std::vector<std::string> want =
      kind == OptimizerKind::muon ? std::vector<std::string>{"muon.momentum.", "adam.m.", "adam.v."}
      : kind == OptimizerKind::adafactor
          ? std::vector<std::string>{"adafactor.row_var.", "adafactor.col_var.",
                                     "adafactor.variance."}
      : kind == OptimizerKind::soap
          ? std::vector<std::string>{"soap.exp_avg.", "soap.exp_avg_sq.", "soap.L.", "soap.Q_L.",
                                     "soap.R.", "soap.Q_R."}
      : kind == OptimizerKind::adamw
          ? std::vector<std::string>{"adam.m.", "adam.v."}
          : std::vector<std::string>{std::string(to_string(kind)) + ".m.",
                                     std::string(to_string(kind)) + ".v."};
  EXPECT_EQ(prefixes, want);
  fs::remove_all(a);
  fs::remove_all(b);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, EveryOptimizer,
    ::testing::Values(std::pair{OptimizerKind::adamw, 0.0}, std::pair{OptimizerKind::muon, 0.0},
                      std::pair{OptimizerKind::stable_adamw, 0.0},
                      std::pair{OptimizerKind::adam_atan2, 0.0},
                      std::pair{OptimizerKind::adafactor, 0.0}, std::pair{OptimizerKind::soap, 0.0},
                      std::pair{OptimizerKind::muon, 0.5},
                      std::pair{OptimizerKind::adamw, 0.5}),
    [](const auto& info) {
      return std::string(to_string(info.param.first)) + (info.param.second > 0 ? "_qk_clip" : "");
    });

TEST(Optimizers, AResumeWithAnotherOptimizerIsRefusedByName) {
  const std::string dir = test::temp_dir("optim_change");
  {
    Trainer t(run_with(OptimizerKind::adamw, 0, 3), dir, false);
    t.run();
  }
  try {
    resume_config(resume_point(dir), {"train.steps=6", "optim.name=muon"});
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    ASSERT_EQ(e.problems.size(), 1u) << e.what();
    EXPECT_NE(e.problems[0].find("optim.name cannot change on resume"), std::string::npos)
        << e.what();
    EXPECT_NE(e.problems[0].find("--init-from"), std::string::npos) << e.what();
  }
  // The trainer itself, given such a config, refuses too, and loading the checkpoint's state
  // into another optimizer names both.
  ResumeOptions from;
  from.config = run_with(OptimizerKind::muon, 0, 6);
  EXPECT_THROW(Trainer(Config{}, dir, true, from), ConfigError);
  Transformer<float> model(run_with(OptimizerKind::muon, 0, 6).model, 1, 8);
  const auto muon = make_optimizer<float>(model.table(), run_with(OptimizerKind::muon, 0, 6).optim,
                                          model.config());
  try {
    load_checkpoint(latest_checkpoint(dir), model, muon.get(), nullptr);
    FAIL() << "no exception";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer state is adamw's, not muon's"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// ---- QK-Clip ---------------------------------------------------------------------------------

struct ClipCase {
  QKNormKind qk_norm;
  QKNormScope scope;
  double gain_offset;
};

// The (L * H) maxima of one forward pass over a fixed batch.
std::vector<double> maxima(Transformer<float>& m, const std::vector<int>& idx,
                           const std::vector<int>& tgt, int B, int T) {
  m.set_collect_attn_max(true);
  m.forward(idx.data(), tgt.data(), B, T, 0.0, false);
  m.set_collect_attn_max(false);
  return m.stats().attn_max_logit_head;
}

class QkClipRule : public ::testing::TestWithParam<ClipCase> {};

TEST_P(QkClipRule, BringsTheWorstHeadToTauWithTheSameInputs) {
  const ClipCase cc = GetParam();
  Config c = test::tiny_run(1);
  ModelConfig& mc = c.model;
  mc.n_layer = 2;
  mc.n_head = 4;
  mc.n_kv_head = 2;
  mc.attn_qkv_bias = true;
  mc.attn_softcap = 30.0;  // the clip acts on the logit before the cap
  mc.qk_norm = cc.qk_norm;
  mc.qk_norm_scope = cc.scope;
  mc.norm_gain_offset = cc.gain_offset;
  const int B = 2, T = 16, H = mc.n_head, G = mc.n_head / mc.kv_heads();
  Transformer<float> m(mc, B, T);
  m.init_params(5);
  Rng rng(9);
  test::perturb(m.params(), rng, 0.3);  // logits of a few units, differing by head
  const auto idx = test::random_tokens(B * T, mc.vocab_size, rng);
  const auto tgt = test::random_tokens(B * T, mc.vocab_size, rng);
  const std::vector<double> S = maxima(m, idx, tgt, B, T);
  double lo = 1e300, hi = 0;
  for (double s : S) lo = std::min(lo, s), hi = std::max(hi, s);
  ASSERT_LT(lo, hi);
  const double tau = 0.5 * (lo + hi);  // some heads above, some below
  // One layer at a time, from the same weights: clipping layer l changes what the layers after
  // it see, so only layer l's heads keep their inputs (the maxima of the other layers are given
  // as 0: nothing of theirs is clipped).
  const std::vector<float> w0(m.params().begin(), m.params().end());
  int clipped_total = 0;
  for (int l = 0; l < mc.n_layer; ++l) {
    std::copy(w0.begin(), w0.end(), m.params().begin());
    std::vector<double> Sl(S.size(), 0.0);
    std::copy(S.begin() + l * H, S.begin() + (l + 1) * H, Sl.begin() + l * H);
    QkClip clip(m.table(), mc, tau, 0.3);
    clip.apply(m.params().data(), Sl);
    const std::vector<double> after = maxima(m, idx, tgt, B, T);
    int clipped = 0;
    double layer_before = 0, layer_after = 0;
    for (int h = 0; h < H; ++h) {
      const long i = static_cast<long>(l) * H + h;
      layer_before = std::max(layer_before, S[i]);
      layer_after = std::max(layer_after, after[i]);
      clipped += S[i] > tau;
      EXPECT_LE(after[i], tau * (1 + 1e-5)) << "layer " << l << " head " << h;
      if (cc.qk_norm != QKNormKind::none && cc.scope == QKNormScope::head) continue;
      // Per head: a head over tau that leads its key group lands at tau; a group with no head
      // over tau is untouched.
      double group_max = 0;
      for (int g = h / G * G; g < (h / G + 1) * G; ++g) group_max = std::max(group_max, S[l * H + g]);
      if (S[i] > tau && S[i] == group_max) {
        EXPECT_NEAR(after[i], tau, 1e-5 * tau) << "layer " << l << " head " << h;
      }
      if (group_max <= tau) {
        EXPECT_EQ(after[i], S[i]) << "layer " << l << " head " << h;
      }
    }
    // Shared gains (scope head): the layer's worst head lands at tau.
    if (layer_before > tau) {
      EXPECT_NEAR(layer_after, tau, 1e-5 * tau) << "layer " << l;
    }
    // Earlier layers are untouched.
    for (long i = 0; i < static_cast<long>(l) * H; ++i) EXPECT_EQ(after[i], S[i]) << i;
    EXPECT_EQ(clip.events().heads_clipped, clipped);
    EXPECT_EQ(clip.events().per_layer[l], clipped);
    clipped_total += clipped;
  }
  EXPECT_GT(clipped_total, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, QkClipRule,
    ::testing::Values(ClipCase{QKNormKind::none, QKNormScope::head, 0.0},
                      ClipCase{QKNormKind::rmsnorm, QKNormScope::full, 0.0},
                      ClipCase{QKNormKind::layernorm, QKNormScope::full, 0.0},
                      ClipCase{QKNormKind::rmsnorm, QKNormScope::head, 1.0},
                      ClipCase{QKNormKind::dyt, QKNormScope::full, 0.0},
                      ClipCase{QKNormKind::derf, QKNormScope::head, 1.0}),
    [](const auto& info) {
      return std::string(to_string(info.param.qk_norm)) + "_" +
             std::string(to_string(info.param.scope)) + (info.param.gain_offset > 0 ? "_offset" : "");
    });

TEST(Optimizers, TheRegistryCoversEveryName) {
  const Config c = test::tiny_run(1);
  Transformer<float> model(c.model, 1, 8);
  for (std::size_t i = 0; i < enum_names<OptimizerKind>().size(); ++i) {
    OptimConfig oc = c.optim;
    oc.name = static_cast<OptimizerKind>(i);
    const auto opt = make_optimizer<float>(model.table(), oc, c.model);
    EXPECT_EQ(opt->kind(), oc.name);
    long n = 0;
    for (const StateArena<float>* a : std::as_const(*opt).state()) n += a->data.size();
    EXPECT_EQ(n, optimizer_state_elements(model.table(), oc)) << to_string(oc.name);
  }
}

// A state that is not parameter-shaped goes through checkpoints under its own names and shapes:
// Adafactor's row and column factors of an (A, B) matrix are saved as (A) and (B) tensors, a
// vector's second moment with the vector's shape, and nothing parameter-shaped for a matrix; the
// checkpoint loads back into a fresh optimizer exactly.
TEST(Optimizers, AdafactorCheckpointHoldsItsFactorsByNameAndShape) {
  const std::string dir = test::temp_dir("optim_adafactor_ckpt");
  std::vector<std::vector<float>> saved;
  {
    Trainer t(run_with(OptimizerKind::adafactor, 0, 3), dir, false);
    t.run();
    saved = state_of(t);
  }
  const std::string ckpt = latest_checkpoint(dir);
  const auto f = SafetensorsFile::open((fs::path(ckpt) / "state.safetensors").string());
  const Config c = run_with(OptimizerKind::adafactor, 0, 3);
  Transformer<float> model(c.model, 1, 8);
  long matrices = 0, vectors = 0;
  for (const ParamSpec& s : model.table().specs()) {
    if (!s.trained) continue;
    const TensorInfo* row = f.find("adafactor.row_var." + s.name);
    const TensorInfo* col = f.find("adafactor.col_var." + s.name);
    const TensorInfo* var = f.find("adafactor.variance." + s.name);
    if (s.shape.size() == 2) {
      ++matrices;
      ASSERT_TRUE(row && col) << s.name;
      EXPECT_EQ(row->shape, std::vector<std::int64_t>{s.shape[0]}) << s.name;
      EXPECT_EQ(col->shape, std::vector<std::int64_t>{s.shape[1]}) << s.name;
      EXPECT_EQ(var, nullptr) << s.name;
      std::vector<float> r(static_cast<std::size_t>(s.shape[0]));
      f.read_f32(row->name, r, row->shape);
      EXPECT_GT(*std::max_element(r.begin(), r.end()), 0.f) << s.name;  // it holds the averages
    } else {
      ++vectors;
      ASSERT_NE(var, nullptr) << s.name;
      EXPECT_EQ(var->shape, s.shape) << s.name;
      EXPECT_EQ(row, nullptr) << s.name;
      EXPECT_EQ(col, nullptr) << s.name;
    }
  }
  EXPECT_GT(matrices, 0);
  EXPECT_GT(vectors, 0);
  // Every tensor of the file is one of these (nothing else, nothing parameter-shaped extra).
  EXPECT_EQ(static_cast<long>(f.tensors().size()), 2 * matrices + vectors);

  expect_state_reloads(ckpt, model, c, 3, saved);
  fs::remove_all(dir);
}

// Adafactor's second-moment ratio (the diagnostics' rms_g2v) is RMS(U), the statistic its update
// is clipped by: each tensor's step has RMS alpha r / max(1, r / d), with alpha =
// max(eps2, RMS(p)) min(lr, 1 / sqrt(t)) (no weight decay here).
TEST(Optimizers, AdafactorRatioIsTheRmsItsUpdateIsClippedBy) {
  Config c = run_with(OptimizerKind::adafactor, 0, 1);
  const double d = 1.2, eps2 = 1e-3;  // optim.adafactor.d set here; eps2 torch's default
  set_key(c, "optim.adafactor.d", "1.2");
  Transformer<float> model(c.model, 1, 8);
  model.init_params(1);
  OptimConfig oc = c.optim;
  oc.weight_decay = 0;
  const auto opt = make_optimizer<float>(model.table(), oc, c.model);
  Rng rng(5);
  const double lr = 1e-2;
  int clipped = 0, unclipped = 0;
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> before(model.params().begin(), model.params().end());
    for (float& g : model.grads()) g = static_cast<float>(0.1 * rng.normal());
    if (t == 2)  // a gradient jump the running averages have not seen: RMS(U) well above d
      for (float& g : model.grads()) g *= 10.f;
    opt->update(model.params(), model.grads(), lr);
    const std::vector<double> r = opt->second_moment_ratio(model.grads());
    for (std::size_t k = 0; k < model.table().specs().size(); ++k) {
      const ParamSpec& s = model.table().specs()[k];
      if (!s.trained) continue;
      double ssp = 0, ssd = 0;
      for (long j = 0; j < s.numel; ++j) {
        const double p0 = before[s.offset + j], d = model.params()[s.offset + j] - p0;
        ssp += p0 * p0;
        ssd += d * d;
      }
      const double n = static_cast<double>(s.numel);
      const double alpha = std::max(eps2, std::sqrt(ssp / n)) *
                           std::min(lr, 1.0 / std::sqrt(static_cast<double>(t)));
      ASSERT_TRUE(std::isfinite(r[k])) << s.name;
      ++(r[k] > d ? clipped : unclipped);
      const double want = alpha * r[k] / std::max(1.0, r[k] / d);
      EXPECT_NEAR(std::sqrt(ssd / n), want, 1e-3 * want) << s.name << " at step " << t;
    }
  }
  EXPECT_GT(clipped, 0);  // both sides of the clipping threshold were checked
  EXPECT_GT(unclipped, 0);
}

// SOAP's matrix-shaped state goes through checkpoints by name and shape as well: an (A, B) matrix
// keeps soap.L and soap.Q_L (A, A), soap.R and soap.Q_R (B, B), and its moments (A, B); a side
// longer than optim.soap.max_precond_dim keeps nothing (here the vocabulary side of the
// embedding); the eigenbases saved are orthogonal, and load back exactly.
TEST(Optimizers, SoapCheckpointHoldsItsMatricesByNameAndShape) {
  const std::string dir = test::temp_dir("optim_soap_ckpt");
  Config c = run_with(OptimizerKind::soap, 0, 5);
  const long max_dim = 64;
  set_key(c, "optim.soap.max_precond_dim", "64");
  std::vector<std::vector<float>> saved;
  {
    Trainer t(c, dir, false);
    t.run();
    saved = state_of(t);
  }
  const std::string ckpt = latest_checkpoint(dir);
  const auto f = SafetensorsFile::open((fs::path(ckpt) / "state.safetensors").string());
  Transformer<float> model(c.model, 1, 8);
  long tensors = 0, sides = 0, identity = 0;
  const auto side = [&](const ParamSpec& s, const char* stat, const char* basis, std::int64_t n) {
    const TensorInfo* S = f.find(std::string("soap.") + stat + "." + s.name);
    const TensorInfo* Q = f.find(std::string("soap.") + basis + "." + s.name);
    if (n > max_dim) {
      EXPECT_TRUE(!S && !Q) << s.name;
      ++identity;
      return;
    }
    ASSERT_TRUE(S && Q) << s.name;
    const std::vector<std::int64_t> want{n, n};
    EXPECT_EQ(S->shape, want) << s.name;
    EXPECT_EQ(Q->shape, want) << s.name;
    std::vector<float> q(static_cast<std::size_t>(n * n));
    f.read_f32(Q->name, q, Q->shape);
    double worst = 0;  // |Q^T Q - I|
    for (long i = 0; i < n; ++i)
      for (long j = 0; j < n; ++j) {
        double d = 0;
        for (long r = 0; r < n; ++r) d += static_cast<double>(q[r * n + i]) * q[r * n + j];
        worst = std::max(worst, std::abs(d - (i == j)));
      }
    EXPECT_LT(worst, 1e-5) << s.name;
    tensors += 2;
    ++sides;
  };
  for (const ParamSpec& s : model.table().specs()) {
    if (!s.trained) continue;
    for (const char* moment : {"soap.exp_avg.", "soap.exp_avg_sq."}) {
      const TensorInfo* m = f.find(moment + s.name);
      ASSERT_NE(m, nullptr) << moment << s.name;
      EXPECT_EQ(m->shape, s.shape) << s.name;
      ++tensors;
    }
    if (s.shape.size() == 2) {
      side(s, "L", "Q_L", s.shape[0]);
      side(s, "R", "Q_R", s.shape[1]);
    }
  }
  EXPECT_GT(sides, 0);
  EXPECT_GT(identity, 0);  // the embedding's vocabulary side
  EXPECT_EQ(static_cast<long>(f.tensors().size()), tensors);

  expect_state_reloads(ckpt, model, c, 5, saved);
  fs::remove_all(dir);
}

// SOAP's products (normlab's GEMM over the pool) and its LAPACK calls (on the calling thread)
// give bitwise the same steps whatever the thread count, eigenbasis refreshes included.
TEST(Optimizers, SoapIsBitwiseTheSameForAnyThreadCount) {
  Config c = run_with(OptimizerKind::soap, 0, 1);
  c.model.d_model = 96;
  c.model.d_ff = 384;
  set_key(c, "optim.soap.precondition_frequency", "2");
  Transformer<float> model(c.model, 1, 8);
  const std::vector<float> p0(model.params().begin(), model.params().end());
  std::vector<std::vector<float>> grads(6, std::vector<float>(p0.size()));
  Rng rng(11);
  for (auto& g : grads)
    for (float& v : g) v = static_cast<float>(0.1 * rng.normal());
  const int before = thread_count();
  const auto run = [&](int threads) {
    set_thread_count(threads);
    std::vector<float> p = p0;
    const auto opt = make_optimizer<float>(model.table(), c.optim, c.model);
    for (std::vector<float> g : grads) opt->update(p, g, 1e-2, 0.5);
    std::vector<std::vector<float>> out{p};
    for (const StateArena<float>* a : std::as_const(*opt).state()) out.push_back(a->data);
    return out;
  };
  const auto one = run(1), three = run(3);
  set_thread_count(before);
  ASSERT_EQ(one.size(), three.size());
  EXPECT_TRUE(one[0] != p0);
  for (std::size_t k = 0; k < one.size(); ++k) EXPECT_TRUE(one[k] == three[k]) << "arena " << k;
}

}  // namespace
}  // namespace normlab
