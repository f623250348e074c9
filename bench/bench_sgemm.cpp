// normlab_bench sgemm: the achievable sgemm rate on the model's own GEMM shapes, the rate that MFU
// is measured against: OpenBLAS as linked, normlab's gemm<float>, oneDNN's sgemm where built
// (NORMLAB_BENCH_DNNL), and normlab's gemm_bf16 beside them, per shape and FLOP-weighted over one
// training step.
#include <cblas.h>
#if defined(NORMLAB_BENCH_DNNL)
#include <oneapi/dnnl/dnnl.h>
#endif

#include <fmt/format.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench_internal.h"
#include "model/transformer.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/rng.h"
#include "tensor/threading.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename();

namespace normlab::bench {
namespace {

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
  linear(C, m.q_width() + 2 * m.kv_width(), "wqkv", L);
  linear(m.q_width(), C, "wo", L);
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

}  // namespace

json run_sgemm(const BenchConfig& bc, int threads) {
  const int nthreads = set_thread_count(threads);
  const ModelConfig& m = bc.model;
  // The same chunking as the model's head (rows per chunk).
  const int head_rows = head_chunk_rows(static_cast<long>(bc.batch) * m.seq_len, m.vocab_size);
  const std::vector<Shape> shapes = model_shapes(bc, head_rows);
  Rng rng(7);
  json rows = json::array();
  double flops = 0, t_blas = 0, t_nl = 0, t_dnnl = 0, t_bf16 = 0;
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
    // gemm_bf16 as it runs here (AMX, AVX512-BF16, or rounded copies + float32)
    const double th = time_per_call([&] {
      gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, 1.f, A.data(), lda, Bm.data(), ldb, beta, Cm.data(),
                s.N);
    });
    t_bf16 += th * s.count;
    row["bf16_gflops"] = f / th / 1e9;
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
  j["bf16_kernel"] = bf16_kernel_name(bf16_kernel());
  return j;
}

}  // namespace normlab::bench
