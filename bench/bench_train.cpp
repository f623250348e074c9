// normlab_bench: training throughput of normlab on fixed model shapes, and the achievable sgemm
// rate on the same model's GEMM shapes, as JSON on stdout. bench/run.sh runs every mode in a fresh
// process (so peak-memory figures do not mix), runs bench/torch_bench.py on the same models and
// writes docs/benchmarks.md.
//
//   normlab_bench train CONFIG [--steps 10] [--warmup 3] [--threads 2] [--precision float32|bf16]
//   normlab_bench sgemm CONFIG [--threads 2]
//   normlab_bench --smoke            tiny model, 2 steps, plus fast-kernel-vs-reference checks
//
// --precision bf16 runs the linear layers and the LM head with bf16 products (fp32 accumulation,
// tensor/gemm_bf16.h; train.matmul_precision); it needs a CPU with AVX512-BF16. The sgemm mode
// times gemm_bf16 next to gemm<float> on the same shapes when the CPU has it.
//
// CONFIG is a, b, c (docs/benchmarks.md) or smoke. A step is what the trainer does: zero_grad,
// forward with the loss and head gradient, backward, global-norm clipping and AdamW.
//
// FLOPs per token = 6 * P_matmul + 12 * L * T * C, where P_matmul counts the weights that take
// part in matrix products (every linear layer and the LM head, V x C, tied or not; not the norms
// or the position table) and the second term is the attention (QK^T and PV, forward and
// backward, over the full T x T square as in PaLM's MFU definition, Chowdhery et al. 2022, App. B).
#include <cblas.h>
#include <sys/resource.h>
#if defined(NORMLAB_BENCH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/softcap.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/rng.h"
#include "tensor/threading.h"
#include "train/optimizer.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename();

namespace normlab::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchConfig {
  std::string name, description;
  ModelConfig model;
  int batch = 8;
  double z_loss = 0;
};

BenchConfig bench_config(const std::string& name) {
  BenchConfig b;
  b.name = name;
  ModelConfig& m = b.model;
  m.placement = Placement::pre;
  m.norm = NormKind::layernorm;
  m.mlp = MlpKind::gelu_tanh;
  m.pos = PosKind::learned;
  m.tie_embeddings = true;
  if (name == "a" || name == "c" || name == "c_matched") {
    m.vocab_size = 256;
    m.d_model = 384;
    m.n_layer = 6;
    m.n_head = 6;
    m.d_ff = 1536;
    m.seq_len = 256;
    b.batch = 8;
    b.description =
        "V=256 C=384 L=6 H=6 F=1536 T=256 B=8, pre, layernorm, gelu_tanh, learned pos, tied";
    if (name == "c" || name == "c_matched") {
      m.placement = Placement::peri;
      m.norm = NormKind::rmsnorm;
      m.qk_norm = QKNormKind::rmsnorm;
      m.qk_norm_scope = QKNormScope::head;
      m.pos = PosKind::rope;
      m.mlp = MlpKind::swiglu;
      m.attn_softcap = 50;
      m.final_softcap = 30;
      b.z_loss = 1e-4;
      b.description =
          "as a, but peri, rmsnorm, qk_norm rmsnorm (head), rope, swiglu, attn cap 50, "
          "final cap 30, z-loss 1e-4";
      if (name == "c_matched") {
        // Shazeer (2020): a GLU feed-forward with 2/3 of the hidden width has the parameters and
        // FLOPs of the ungated one, so that c_matched differs from a only by the techniques.
        m.d_ff = 1024;
        b.description =
            "as c, but SwiGLU hidden F=1024 (2/3 x 1536: the FLOPs and parameters of a's FFN)";
      }
    }
  } else if (name == "b") {
    m.vocab_size = 50257;
    m.d_model = 768;
    m.n_layer = 12;
    m.n_head = 12;
    m.d_ff = 3072;
    m.seq_len = 64;
    b.batch = 4;
    b.description = "GPT-2 small shapes: V=50257 C=768 L=12 H=12 F=3072 T=64 B=4, layout as a";
  } else if (name == "smoke") {
    m.vocab_size = 64;
    m.d_model = 32;
    m.n_layer = 2;
    m.n_head = 2;
    m.d_ff = 64;
    m.seq_len = 16;
    m.placement = Placement::peri;
    m.norm = NormKind::rmsnorm;
    m.qk_norm = QKNormKind::rmsnorm;
    m.pos = PosKind::rope;
    m.mlp = MlpKind::swiglu;
    m.attn_softcap = 50;
    m.final_softcap = 30;
    b.batch = 2;
    b.z_loss = 1e-4;
    b.description = "smoke: tiny model with the features of c";
  } else {
    throw std::runtime_error(fmt::format("unknown config '{}' (a, b, c, c_matched or smoke)", name));
  }
  return b;
}

double peak_rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

double rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  return 0;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
         1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

bool gated(MlpKind m) { return m == MlpKind::swiglu || m == MlpKind::geglu; }

// Weights that take part in matrix products, per the FLOP formula above.
long matmul_params(const ModelConfig& m) {
  const long C = m.d_model, F = m.d_ff, F_in = gated(m.mlp) ? 2 * F : F;
  const long per_layer = 3 * C * C + C * C + F_in * C + C * F;
  return m.n_layer * per_layer + static_cast<long>(m.vocab_size) * C;
}

double flops_per_token(const ModelConfig& m) {
  return 6.0 * matmul_params(m) + 12.0 * m.n_layer * m.seq_len * m.d_model;
}

// ---------------------------------------------------------------------------------------------
// Training steps

json run_train(const BenchConfig& bc, int steps, int warmup, int threads,
               GemmPrecision prec = GemmPrecision::float32) {
  if (prec == GemmPrecision::bf16 && !bf16_hardware())
    throw std::runtime_error(
        "--precision bf16 needs a CPU with AVX512-BF16 (avx512bf16); this one "
        "has only the slow portable fallback, which is not worth timing");
  const double rss0 = rss_mb();
  const int nthreads = set_thread_count(threads);
  const ModelConfig& mc = bc.model;
  const int B = bc.batch, Tn = mc.seq_len;
  Transformer<float> model(mc, B, Tn);
  model.set_matmul_precision(prec);
  model.init_params(1234);
  OptimConfig oc;  // lr 1e-3, betas (0.9, 0.95), eps 1e-8, wd 0.1, clip 1.0
  AdamW<float> opt(model.table(), oc);
  Rng rng(42);
  const long n = static_cast<long>(B) * Tn;
  std::vector<int> idx(n), tgt(n);
  std::vector<double> ms, cpu_ms, fwd_ms, bwd_ms, opt_ms, fwd_cpu, bwd_cpu, opt_cpu;
  double loss0 = 0, loss_last = 0;
  std::vector<double> losses;  // every step's, warm-up included
  for (int s = 0; s < warmup + steps; ++s) {
    for (long i = 0; i < n; ++i) {
      idx[i] = static_cast<int>(rng.below(mc.vocab_size));
      tgt[i] = static_cast<int>(rng.below(mc.vocab_size));
    }
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    model.zero_grad();
    const LossStats st = model.forward(idx.data(), tgt.data(), B, Tn, bc.z_loss, true);
    const auto t1 = Clock::now();
    const double c1 = cpu_seconds();
    model.backward();
    const auto t2 = Clock::now();
    const double c2 = cpu_seconds();
    opt.step(model.params(), model.grads(), oc.lr);
    const auto t3 = Clock::now();
    const double c3 = cpu_seconds();
    const double dt = std::chrono::duration<double, std::milli>(t3 - t0).count();
    if (s == 0) loss0 = st.loss;
    loss_last = st.loss;
    losses.push_back(st.loss);
    if (!std::isfinite(st.loss)) throw std::runtime_error("non-finite loss in the benchmark");
    if (s >= warmup) {
      ms.push_back(dt);
      cpu_ms.push_back((c3 - c0) * 1e3);
      fwd_cpu.push_back((c1 - c0) * 1e3);
      bwd_cpu.push_back((c2 - c1) * 1e3);
      opt_cpu.push_back((c3 - c2) * 1e3);
      fwd_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      bwd_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
      opt_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
    }
  }
  const double step_ms = median(ms);
  const double tok_s = n / (step_ms / 1e3);
  json j;
  j["impl"] = "normlab";
  j["config"] = bc.name;
  j["precision"] = prec == GemmPrecision::bf16 ? "bf16" : "float32";
  j["description"] = bc.description;
  j["threads"] = nthreads;
  j["params"] = model.table().total();
  j["matmul_params"] = matmul_params(mc);
  j["tokens_per_step"] = n;
  j["flops_per_token"] = flops_per_token(mc);
  j["steps"] = steps;
  j["warmup"] = warmup;
  j["step_ms"] = ms;
  j["step_ms_median"] = step_ms;
  // CPU time of the process (all threads, user + system) per step: a check on the wall time when
  // other processes share the cores (spin-waiting counts here too).
  j["cpu_ms_median"] = median(cpu_ms);
  // Where the step goes: zero_grad + forward with the loss and the head's gradient; backward of
  // the body; clipping + AdamW.
  j["forward_ms_median"] = median(fwd_ms);
  j["backward_ms_median"] = median(bwd_ms);
  j["optimizer_ms_median"] = median(opt_ms);
  j["forward_cpu_ms_median"] = median(fwd_cpu);
  j["backward_cpu_ms_median"] = median(bwd_cpu);
  j["optimizer_cpu_ms_median"] = median(opt_cpu);
  j["tokens_per_s"] = tok_s;
  j["gflops"] = flops_per_token(mc) * tok_s / 1e9;
  j["loss_first"] = loss0;
  j["loss_last"] = loss_last;
  j["losses"] = losses;
  j["peak_rss_mb"] = peak_rss_mb();
  j["baseline_rss_mb"] = rss0;
  j["activation_mb"] = model.activation_elements() * 4.0 / (1 << 20);
  return j;
}

// ---------------------------------------------------------------------------------------------
// sgemm on the model's own GEMM shapes

struct Shape {
  bool ta, tb;
  int M, N, K;
  long count;  // how many times one training step runs it
  std::string what;
};

// The GEMMs of one training step: every linear layer forward (y = x W^T), backward for the input
// (dx = dy W) and for the weight (dW = dy^T x), and the LM head over its row chunks.
std::vector<Shape> model_shapes(const BenchConfig& bc, int head_rows) {
  const ModelConfig& m = bc.model;
  const int N = bc.batch * m.seq_len, C = m.d_model, F = m.d_ff, V = m.vocab_size;
  const int F_in = gated(m.mlp) ? 2 * F : F;
  const long L = m.n_layer;
  std::vector<Shape> s;
  auto linear = [&](int I, int O, const std::string& w, long count) {
    s.push_back({false, true, N, O, I, count, w + " fwd"});
    s.push_back({false, false, N, I, O, count, w + " dx"});
    s.push_back({true, false, O, I, N, count, w + " dW"});
  };
  linear(C, 3 * C, "wqkv", L);
  linear(C, C, "wo", L);
  linear(C, F_in, "w_in", L);
  linear(F, C, "w_out", L);
  const long chunks = (N + head_rows - 1) / head_rows;
  s.push_back({false, true, head_rows, V, C, chunks, "head fwd"});
  s.push_back({false, false, head_rows, C, V, chunks, "head dx"});
  s.push_back({true, false, V, C, head_rows, chunks, "head dW"});
  return s;
}

template <class F>
double time_per_call(F&& f) {
  f();
  f();
  int reps = 1;
  for (;;) {  // calibrate so that one trial lasts about 50 ms
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (dt > 0.05 || reps > (1 << 20)) break;
    reps *= 2;
  }
  std::vector<double> trials;
  for (int t = 0; t < 5; ++t) {
    const auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    trials.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / reps);
  }
  return median(trials);
}

json run_sgemm(const BenchConfig& bc, int threads) {
  const int nthreads = set_thread_count(threads);
  const ModelConfig& m = bc.model;
  // The same chunking as the model's head (rows per chunk).
  const int head_rows = head_chunk_rows(static_cast<long>(bc.batch) * m.seq_len, m.vocab_size);
  const std::vector<Shape> shapes = model_shapes(bc, head_rows);
  Rng rng(7);
  json rows = json::array();
  double flops = 0, t_blas = 0, t_nl = 0, t_dnnl = 0, t_bf16 = 0;
  const bool bf16 = bf16_hardware();
  for (const Shape& s : shapes) {
    const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    std::vector<float> A(static_cast<long>(s.M) * s.K), Bm(static_cast<long>(s.K) * s.N),
        Cm(static_cast<long>(s.M) * s.N, 0.f);
    for (auto& x : A) x = static_cast<float>(rng.normal());
    for (auto& x : Bm) x = static_cast<float>(rng.normal());
    const float beta = s.ta ? 1.f : 0.f;  // weight gradients accumulate
    openblas_set_num_threads(nthreads);
    const double tb = time_per_call([&] {
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans,
                  s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(), ldb, beta, Cm.data(), s.N);
    });
    set_thread_count(nthreads);
    const double tn = time_per_call([&] {
      gemm<float>(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(), ldb, beta, Cm.data(),
                  s.N);
    });
    const double f = 2.0 * s.M * s.N * s.K;
    flops += f * s.count;
    t_blas += tb * s.count;
    t_nl += tn * s.count;
    json row = {{"what", s.what},
                {"ta", s.ta},
                {"tb", s.tb},
                {"M", s.M},
                {"N", s.N},
                {"K", s.K},
                {"count", s.count},
                {"blas_gflops", f / tb / 1e9},
                {"normlab_gflops", f / tn / 1e9}};
    if (bf16) {
      const double th = time_per_call([&] {
        gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(), ldb, beta, Cm.data(),
                  s.N);
      });
      t_bf16 += th * s.count;
      row["bf16_gflops"] = f / th / 1e9;
    }
#if defined(NORMLAB_BENCH_DNNL)
    // oneDNN threads with OpenMP (omp_get_max_threads, set by set_thread_count).
    const double td = time_per_call([&] {
      dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(),
                 ldb, beta, Cm.data(), s.N);
    });
    t_dnnl += td * s.count;
    row["dnnl_gflops"] = f / td / 1e9;
#endif
    rows.push_back(row);
  }
  json j;
  j["config"] = bc.name;
  j["threads"] = nthreads;
  j["blas"] = fmt::format("OpenBLAS core {}", openblas_get_corename());
  j["shapes"] = rows;
  // FLOP-weighted over one training step's GEMMs: total FLOPs / total time.
  j["blas_gflops"] = flops / t_blas / 1e9;
  j["normlab_gemm_gflops"] = flops / t_nl / 1e9;
  if (t_dnnl > 0) j["dnnl_gflops"] = flops / t_dnnl / 1e9;
  if (t_bf16 > 0) j["normlab_bf16_gflops"] = flops / t_bf16 / 1e9;
  return j;
}

// ---------------------------------------------------------------------------------------------
// Smoke: fast kernels against their plain references, then a tiny model for 2 steps.

int failures = 0;

void expect_close(const std::string& what, const std::vector<float>& got,
                  const std::vector<double>& want, double tol) {
  double worst = 0;
  long at = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(got[i] - want[i]) / (1.0 + std::fabs(want[i]));
    if (!(e <= worst)) worst = e, at = static_cast<long>(i);
  }
  const bool ok = worst <= tol;
  std::fprintf(stderr, "%s %-40s max rel err %.3g\n", ok ? "ok  " : "FAIL", what.c_str(), worst);
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "     at %ld: got %.9g want %.9g\n", at, got[at], want[at]);
  }
}

void check_gemm() {
  Rng rng(3);
  const int dims[][3] = {{1, 1, 1},      {7, 5, 9},        {13, 67, 3},
                         {70, 129, 200}, {300, 70, 517},   {6, 64, 64},
                         {64, 256, 64},  {257, 1000, 300}, {20, 70, 9000}};
  for (const auto& d : dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.f, 1.f}) {
          const int M = d[0], N = d[1], K = d[2], pad = 3;
          const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
          std::vector<float> A(static_cast<long>(ta ? K : M) * lda),
              Bm(static_cast<long>(tb ? N : K) * ldb), C1(static_cast<long>(M) * ldc);
          for (auto& x : A) x = static_cast<float>(rng.normal());
          for (auto& x : Bm) x = static_cast<float>(rng.normal());
          for (auto& x : C1) x = static_cast<float>(rng.normal());
          std::vector<double> Ad(A.begin(), A.end()), Bd(Bm.begin(), Bm.end()),
              C2(C1.begin(), C1.end());
          gemm<float>(ta, tb, M, N, K, 0.75f, A.data(), lda, Bm.data(), ldb, beta, C1.data(), ldc);
          gemm_ref<double>(ta, tb, M, N, K, 0.75, Ad.data(), lda, Bd.data(), ldb, beta, C2.data(),
                           ldc);
          expect_close(fmt::format("gemm ta={} tb={} {}x{}x{} beta={}", ta, tb, M, N, K, beta), C1,
                       C2, 1e-5 * std::sqrt(K));
        }
}

// gemm_bf16 against a double product of the bf16-rounded inputs: only fp32 accumulation error.
void check_gemm_bf16() {
  Rng rng(6);
  const int dims[][3] = {{7, 5, 9}, {13, 67, 3}, {70, 129, 201}, {257, 1000, 301}};
  for (const auto& d : dims)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int M = d[0], N = d[1], K = d[2];
        const int lda = ta ? M : K, ldb = tb ? K : N;
        std::vector<float> A(static_cast<long>(M) * K), Bm(static_cast<long>(K) * N),
            C1(static_cast<long>(M) * N);
        for (auto& x : A) x = static_cast<float>(rng.normal());
        for (auto& x : Bm) x = static_cast<float>(rng.normal());
        for (auto& x : C1) x = static_cast<float>(rng.normal());
        std::vector<double> Ad(A.size()), Bd(Bm.size()), C2(C1.begin(), C1.end());
        for (std::size_t i = 0; i < A.size(); ++i) Ad[i] = round_to_bf16(A[i]);
        for (std::size_t i = 0; i < Bm.size(); ++i) Bd[i] = round_to_bf16(Bm[i]);
        gemm_bf16(ta, tb, M, N, K, 0.75f, A.data(), lda, Bm.data(), ldb, 0.5f, C1.data(), N);
        gemm_ref<double>(ta, tb, M, N, K, 0.75, Ad.data(), lda, Bd.data(), ldb, 0.5, C2.data(), N);
        expect_close(fmt::format("gemm_bf16 ta={} tb={} {}x{}x{}", ta, tb, M, N, K), C1, C2,
                     1e-5 * std::sqrt(K));
      }
}

// Tiled attention (float, the model's path) against the plain reference kernel in double, at a
// sequence length that spans several tiles and a ragged last tile, with and without the cap.
void check_attention() {
  Rng rng(4);
  const int B = 2, Tn = 150, H = 3, D = 64, C = H * D;
  for (float cap : {0.f, 5.f}) {
    const long n = static_cast<long>(B) * Tn * C;
    std::vector<float> q(n), k(n), v(n), dout(n);
    for (auto* x : {&q, &k, &v, &dout})
      for (auto& e : *x) e = static_cast<float>(rng.normal());
    auto dbl = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
    std::vector<double> qd = dbl(q), kd = dbl(k), vd = dbl(v), dd = dbl(dout), od(n),
                        P(static_cast<long>(B) * H * Tn * Tn), th(P.size()), dq(n, 0.0), dk(n, 0.0),
                        dv(n, 0.0);
    const double scale = 1.0 / std::sqrt(D);
    ops::attention_forward(od.data(), P.data(), cap > 0 ? th.data() : nullptr, qd.data(), kd.data(),
                           vd.data(), B, Tn, H, D, scale, static_cast<double>(cap));
    ops::attention_backward(dq.data(), dk.data(), dv.data(), dd.data(), qd.data(), kd.data(),
                            vd.data(), P.data(), cap > 0 ? th.data() : nullptr, B, Tn, H, D, scale,
                            static_cast<double>(cap));
    std::vector<float> o(n), lse(static_cast<long>(B) * H * Tn), gq(n), gk(n), gv(n);
    ops::attention_forward_tiled(o.data(), C, lse.data(), q.data(), C, k.data(), C, v.data(), C, B,
                                 Tn, H, D, static_cast<float>(scale), cap);
    ops::attention_backward_tiled(gq.data(), C, gk.data(), C, gv.data(), C, dout.data(), C,
                                  q.data(), C, k.data(), C, v.data(), C, lse.data(), B, Tn, H, D,
                                  static_cast<float>(scale), cap);
    const std::string c = fmt::format(" cap={}", cap);
    expect_close("attention tiled o" + c, o, od, 2e-5);
    expect_close("attention tiled dq" + c, gq, dq, 2e-5);
    expect_close("attention tiled dk" + c, gk, dk, 2e-5);
    expect_close("attention tiled dv" + c, gv, dv, 2e-5);
  }
}

// Vectorised float elementwise kernels against the plain double references.
void check_pointwise() {
  Rng rng(5);
  const int n = 100000;
  std::vector<float> x(n), y(n), dx(n), dy(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(rng.normal() * 4), dy[i] = 1.f;
  for (auto a : {ops::Activation::gelu_erf, ops::Activation::gelu_tanh, ops::Activation::silu}) {
    std::vector<double> want(n), dwant(n);
    for (int i = 0; i < n; ++i) {
      want[i] = ops::act_value<double>(a, x[i]);
      dwant[i] = ops::act_grad<double>(a, x[i]);
    }
    ops::activation_forward<float>(a, y.data(), x.data(), n);
    std::fill(dx.begin(), dx.end(), 0.f);
    ops::activation_backward<float>(a, dx.data(), dy.data(), x.data(), n);
    // Tolerance: what the plain float formula (library tanh/exp) itself loses, or 1e-6.
    double ref_err = 0;
    for (int i = 0; i < n; ++i) {
      ref_err = std::max(
          ref_err, std::fabs(ops::act_value<float>(a, x[i]) - want[i]) / (1 + std::fabs(want[i])));
      ref_err = std::max(
          ref_err, std::fabs(ops::act_grad<float>(a, x[i]) - dwant[i]) / (1 + std::fabs(dwant[i])));
    }
    const double tol = std::max(1e-6, 2 * ref_err);
    expect_close(fmt::format("activation {} forward", static_cast<int>(a)), y, want, tol);
    expect_close(fmt::format("activation {} backward", static_cast<int>(a)), dx, dwant, tol);
  }
  std::vector<double> want(n);
  for (int i = 0; i < n; ++i) want[i] = 30.0 * std::tanh(x[i] * 10 / 30.0);
  std::vector<float> xs(n);
  for (int i = 0; i < n; ++i) xs[i] = x[i] * 10;
  ops::softcap_forward<float>(y.data(), xs.data(), n, 30.f);
  expect_close("softcap forward", y, want, 1e-6);
  // Cross-entropy with z-loss: values and gradient of one chunk.
  const int N = 37, V = 1000;
  std::vector<float> logits(static_cast<long>(N) * V), dl(logits.size()), lse(N);
  std::vector<int> t(N);
  for (auto& e : logits) e = static_cast<float>(rng.normal() * 3);
  for (auto& e : t) e = static_cast<int>(rng.below(V));
  std::vector<double> ld(logits.begin(), logits.end()), dld(ld.size()), lsed(N);
  const auto sf = ops::cross_entropy_forward_backward<float>(dl.data(), lse.data(), logits.data(),
                                                             t.data(), N, V, 1e-2f, 0.5f);
  const auto sd = ops::cross_entropy_forward_backward<double>(dld.data(), lsed.data(), ld.data(),
                                                              t.data(), N, V, 1e-2, 0.5);
  expect_close("cross-entropy lse", lse, lsed, 1e-6);
  expect_close("cross-entropy dlogits", dl, dld, 1e-6);
  expect_close("cross-entropy sums", {static_cast<float>(sf.ce), static_cast<float>(sf.lse_sq)},
               {sd.ce, sd.lse_sq}, 1e-5);
}

int run_smoke() {
  set_thread_count(0);
  check_gemm();
  check_attention();
  check_pointwise();
  const BenchConfig bc = bench_config("smoke");
  const json j = run_train(bc, 2, 0, 0);
  std::printf("%s\n", j.dump().c_str());
  if (bf16_hardware()) {  // the bf16 path briefly: kernel check and 2 training steps
    check_gemm_bf16();
    const json jb = run_train(bc, 2, 0, 0, GemmPrecision::bf16);
    std::printf("%s\n", jb.dump().c_str());
  } else {
    std::fprintf(stderr, "skip bf16 path: this CPU has no AVX512-BF16\n");
  }
  const json g = run_sgemm(bc, 0);
  (void)g;
  if (failures) std::fprintf(stderr, "%d kernel check(s) failed\n", failures);
  return failures ? 1 : 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: normlab_bench train|sgemm a|b|c|c_matched|smoke [--steps N] [--warmup N] "
               "[--threads N] [--precision float32|bf16]\n       normlab_bench --smoke\n");
  return 2;
}

}  // namespace
}  // namespace normlab::bench

int main(int argc, char** argv) {
  using namespace normlab::bench;
  try {
    if (argc >= 2 && std::strcmp(argv[1], "--smoke") == 0) return run_smoke();
    if (argc < 3) return usage();
    const std::string mode = argv[1];
    const BenchConfig bc = bench_config(argv[2]);
    int steps = 10, warmup = 3, threads = 2;
    normlab::GemmPrecision prec = normlab::GemmPrecision::float32;
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string k = argv[i];
      const int v = std::atoi(argv[i + 1]);
      if (k == "--precision") {
        const std::string p = argv[i + 1];
        if (p == "bf16")
          prec = normlab::GemmPrecision::bf16;
        else if (p != "float32")
          throw std::runtime_error(fmt::format("--precision '{}': expected float32 or bf16", p));
      } else if (k == "--steps")
        steps = v;
      else if (k == "--warmup")
        warmup = v;
      else if (k == "--threads")
        threads = v;
      else
        return usage();
    }
    json j;
    if (mode == "train")
      j = run_train(bc, steps, warmup, threads, prec);
    else if (mode == "sgemm")
      j = run_sgemm(bc, threads);
    else
      return usage();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab_bench: %s\n", e.what());
    return 1;
  }
}
