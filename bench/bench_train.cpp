// normlab_bench: training throughput of normlab on fixed model shapes, and the achievable sgemm
// rate on the same model's GEMM shapes, as JSON on stdout. bench/run.sh runs every mode in a fresh
// process (so peak-memory figures do not mix), runs bench/torch_bench.py on the same models and
// writes docs/benchmarks.md.
//
//   normlab_bench train CONFIG [--steps 10] [--warmup 3] [--threads 2] [--precision float32|bf16]
//   normlab_bench sgemm CONFIG [--threads 2]
//   normlab_bench decode CONFIG [--prompt 128] [--tokens 128] [--threads 2] [--reps 3]
//   normlab_bench --smoke            tiny model, 2 steps (the kernel checks are in tests/)
//
// --precision bf16 runs the linear layers and the LM head with bf16 products (fp32 accumulation,
// tensor/gemm_bf16.h; train.matmul_precision): AMX tiles or AVX512-BF16 where the CPU has them,
// else the float32 kernel on bf16-rounded copies (JSON "bf16_kernel").
// --bf16-kernel amx|avx512bf16|rounded_float|portable picks one (the CPU must have it). The
// sgemm mode times gemm_bf16 next to gemm<float> on the same shapes, and reports its kernel.
//
// CONFIG is a, b, c, c_matched, gqa, gqa_mha (docs/benchmarks.md) or smoke, gqa_smoke. A step is
// what the trainer does: zero_grad, forward with the loss and head gradient, backward, global-norm
// clipping and AdamW.
//
// FLOPs per token = 6 * P_matmul + 12 * L * T * C, where P_matmul counts the weights that take
// part in matrix products (every linear layer and the LM head, V x C, tied or not; not the norms
// or the position table) and the second term is the attention (QK^T and PV, forward and
// backward, over the full T x T square as in PaLM's MFU definition, Chowdhery et al. 2022, App. B).
// With grouped-query attention or an explicit head size the projections count at their real
// widths (queries and the output n_head * head_dim, keys and values n_kv_head * head_dim) and C in
// the attention term is the query width n_head * head_dim.
//
// decode: batch-1 greedy decoding with the KV cache (Transformer::make_cache / forward_cached, as
// `normlab generate` does): one forward over a random prompt of --prompt tokens (prefill), then
// --tokens single-token forwards, each feeding back the argmax of the previous logits, so that the
// cache ends up holding prompt + tokens positions (<= seq_len). Prefill and decode tokens/s are
// medians over --reps repetitions (after one untimed), each with a fresh cache; the KV-cache bytes
// are those of the cache's k and v vectors (n_layer * seq_len * kv_width * 2 * sizeof(float)).
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
#include <optional>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "normlab/communicator.h"
#include "train/schedule.h"
#include "train/step.h"
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
  } else if (name == "gqa" || name == "gqa_mha" || name == "gqa_smoke") {
    // Llama-shaped (transformers' LlamaConfig defaults: untied head, RMSNorm eps 1e-6, RoPE base
    // 10000, no biases), sized for a 2-core CPU; bench/torch_gqa.py builds the same model as
    // LlamaForCausalLM. gqa: 2 key/value heads shared by 8 query heads (4:1); gqa_mha: the same
    // model with 8 key/value heads (full multi-head attention).
    m.norm = NormKind::rmsnorm;
    m.norm_eps = 1e-6;
    m.mlp = MlpKind::swiglu;
    m.pos = PosKind::rope;
    m.rope_theta = 10000.0;
    m.tie_embeddings = false;
    m.vocab_size = 2048;
    m.d_model = 512;
    m.n_layer = 6;
    m.n_head = 8;
    m.n_kv_head = name == "gqa_mha" ? 8 : 2;
    m.head_dim = 64;
    m.d_ff = 1408;
    m.seq_len = 256;
    b.batch = 4;
    b.description = fmt::format(
        "Llama-shaped: V=2048 C=512 L=6 H=8 KV heads={} head_dim=64 F=1408 T=256 B=4, pre, "
        "rmsnorm (eps 1e-6), swiglu, rope 10000, untied, no biases",
        m.n_kv_head);
    if (name == "gqa_smoke") {
      m.vocab_size = 64;
      m.d_model = 32;
      m.n_layer = 2;
      m.n_head = 4;
      m.n_kv_head = 2;
      m.head_dim = 8;
      m.d_ff = 64;
      m.seq_len = 32;
      b.batch = 2;
      b.description = "gqa_smoke: tiny model with the layout of gqa (4 query heads over 2 KV heads)";
    }
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
    throw std::runtime_error(fmt::format(
        "unknown config '{}' (a, b, c, c_matched, gqa, gqa_mha, smoke or gqa_smoke)", name));
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
  const long Cq = m.q_width(), Ckv = m.kv_width();
  const long per_layer = (Cq + 2 * Ckv) * C + Cq * C + F_in * C + C * F;
  return m.n_layer * per_layer + static_cast<long>(m.vocab_size) * C;
}

double flops_per_token(const ModelConfig& m) {
  return 6.0 * matmul_params(m) + 12.0 * m.n_layer * m.seq_len * m.q_width();
}

// ---------------------------------------------------------------------------------------------
// Training steps

// Knobs for studying the dynamics of the benchmark's short run (bench/run.sh uses the defaults):
// the optimizer (lr 1e-3, betas (0.9, 0.95), eps 1e-8, wd 0.1, clip 1.0; a constant learning rate
// after `warmup_steps` of the trainer's linear warmup, none by default), the seeds, and the LM
// head's product precision apart from the blocks' (default: the same as --precision).
struct TrainKnobs {
  OptimConfig optim = [] {
    OptimConfig o;
    o.warmup_steps = 0;
    o.schedule = ScheduleKind::constant;
    return o;
  }();
  std::uint64_t init_seed = 1234, data_seed = 42;
  std::optional<GemmPrecision> head_precision;
};

json run_train(const BenchConfig& bc, int steps, int warmup, int threads,
               GemmPrecision prec = GemmPrecision::float32, const TrainKnobs& knobs = {}) {
  const double rss0 = rss_mb();
  const int nthreads = set_thread_count(threads);
  const ModelConfig& mc = bc.model;
  const int B = bc.batch, Tn = mc.seq_len;
  Transformer<float> model(mc, B, Tn);
  model.set_matmul_precision(prec);
  if (knobs.head_precision) model.set_head_matmul_precision(*knobs.head_precision);
  model.init_params(knobs.init_seed);
  const OptimConfig& oc = knobs.optim;
  AdamW<float> opt(model.table(), oc);
  const auto comm = make_single_process_communicator();
  TrainStep train_step(model, *comm, {B, Tn, 1, bc.z_loss});
  Rng rng(knobs.data_seed);
  const long n = static_cast<long>(B) * Tn;
  std::vector<int> idx(n), tgt(n);
  const NextBatch next_batch = [&](int* i, int* t) {
    std::copy(idx.begin(), idx.end(), i);
    std::copy(tgt.begin(), tgt.end(), t);
  };
  std::vector<double> ms, cpu_ms, fwd_ms, bwd_ms, opt_ms, opt_cpu;
  double loss0 = 0, loss_last = 0;
  std::vector<double> losses;  // every step's, warm-up included
  std::vector<double> grad_norms;
  for (int s = 0; s < warmup + steps; ++s) {
    for (long i = 0; i < n; ++i) {
      idx[i] = static_cast<int>(rng.below(mc.vocab_size));
      tgt[i] = static_cast<int>(rng.below(mc.vocab_size));
    }
    // The trainer's step: zero grad, forward with the loss and the head gradient, backward,
    // gradient norm (TrainStep), then clipping + AdamW.
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    const StepResult st = train_step.run(next_batch);
    const auto t2 = Clock::now();
    const double c2 = cpu_seconds();
    opt.step(model.params(), model.grads(), learning_rate(oc, s, warmup + steps), st.grad_norm);
    const auto t3 = Clock::now();
    const double c3 = cpu_seconds();
    const double dt = std::chrono::duration<double, std::milli>(t3 - t0).count();
    if (s == 0) loss0 = st.loss.loss;
    loss_last = st.loss.loss;
    losses.push_back(st.loss.loss);
    grad_norms.push_back(st.grad_norm);
    if (!std::isfinite(st.loss.loss)) throw std::runtime_error("non-finite loss in the benchmark");
    if (s >= warmup) {
      ms.push_back(dt);
      cpu_ms.push_back((c3 - c0) * 1e3);
      opt_cpu.push_back((c3 - c2) * 1e3);
      fwd_ms.push_back(st.forward_s * 1e3);
      bwd_ms.push_back(st.backward_s * 1e3);
      opt_ms.push_back(std::chrono::duration<double, std::milli>(t3 - t2).count());
    }
  }
  const double step_ms = median(ms);
  const double tok_s = n / (step_ms / 1e3);
  json j;
  j["impl"] = "normlab";
  j["config"] = bc.name;
  j["precision"] = prec == GemmPrecision::bf16 ? "bf16" : "float32";
  if (prec == GemmPrecision::bf16) j["bf16_kernel"] = bf16_kernel_name(bf16_kernel());
  j["head_precision"] = model.head_matmul_precision() == GemmPrecision::bf16 ? "bf16" : "float32";
  j["lr"] = oc.lr;
  j["lr_warmup"] = oc.warmup_steps;
  j["init_seed"] = knobs.init_seed;
  j["data_seed"] = knobs.data_seed;
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
  j["optimizer_cpu_ms_median"] = median(opt_cpu);
  j["tokens_per_s"] = tok_s;
  j["gflops"] = flops_per_token(mc) * tok_s / 1e9;
  j["loss_first"] = loss0;
  j["loss_last"] = loss_last;
  j["losses"] = losses;
  j["grad_norms"] = grad_norms;  // before clipping
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

// ---------------------------------------------------------------------------------------------
// Greedy decoding with the KV cache (batch 1)

json run_decode(const BenchConfig& bc, int prompt_len, int tokens, int threads, int reps) {
  const ModelConfig& mc = bc.model;
  if (prompt_len < 1 || tokens < 1 || prompt_len + tokens > mc.seq_len)
    throw std::runtime_error(fmt::format("--prompt {} + --tokens {} must fit seq_len = {}",
                                         prompt_len, tokens, mc.seq_len));
  if (reps < 1) throw std::runtime_error("--reps must be at least 1");
  const double rss0 = rss_mb();
  const int nthreads = set_thread_count(threads);
  Transformer<float> model(mc, 1, mc.seq_len);
  model.init_params(1234);
  Rng rng(7);
  std::vector<int> prompt(prompt_len);
  for (int& t : prompt) t = static_cast<int>(rng.below(mc.vocab_size));
  const int V = mc.vocab_size;
  std::vector<float> logits(V);
  auto argmax = [&] {
    return static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };
  std::vector<double> pre_ms, dec_ms;
  std::vector<int> first_tokens;
  long kv_bytes = 0;
  int kv_len = 0;
  for (int r = 0; r < 1 + reps; ++r) {  // the first repetition is not timed
    auto cache = model.make_cache();
    std::vector<int> toks;
    const auto t0 = Clock::now();
    model.forward_cached(prompt.data(), prompt_len, cache, logits.data());
    int tok = argmax();
    const auto t1 = Clock::now();
    toks.push_back(tok);
    for (int i = 0; i < tokens; ++i) {
      model.forward_cached(&tok, 1, cache, logits.data());
      tok = argmax();
      toks.push_back(tok);
    }
    const auto t2 = Clock::now();
    if (r == 0)
      first_tokens = toks;
    else if (toks != first_tokens)
      throw std::runtime_error("greedy decoding differs between repetitions");
    if (r > 0) {
      pre_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      dec_ms.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
    }
    kv_bytes = static_cast<long>(cache.k.size() + cache.v.size()) * sizeof(float);
    kv_len = cache.len;
  }
  const double p = median(pre_ms), d = median(dec_ms);
  json j;
  j["impl"] = "normlab";
  j["mode"] = "decode";
  j["config"] = bc.name;
  j["description"] = bc.description;
  j["threads"] = nthreads;
  j["params"] = model.table().total();
  j["prompt"] = prompt_len;
  j["tokens"] = tokens;
  j["reps"] = reps;
  j["prefill_ms"] = pre_ms;
  j["decode_ms"] = dec_ms;
  j["prefill_ms_median"] = p;
  j["decode_ms_median"] = d;
  j["prefill_tokens_per_s"] = prompt_len / (p / 1e3);
  j["decode_tokens_per_s"] = tokens / (d / 1e3);
  // The cache as allocated (every position up to seq_len), and what the formula says it should be.
  j["kv_cache_bytes"] = kv_bytes;
  j["kv_cache_formula_bytes"] =
      static_cast<long>(mc.n_layer) * mc.seq_len * mc.kv_width() * 2 * sizeof(float);
  j["kv_cache_positions"] = kv_len;
  j["kv_width"] = mc.kv_width();
  j["generated_head"] =
      std::vector<int>(first_tokens.begin(), first_tokens.begin() + std::min<long>(8, first_tokens.size()));
  j["peak_rss_mb"] = peak_rss_mb();
  j["baseline_rss_mb"] = rss0;
  return j;
}

// ---------------------------------------------------------------------------------------------
// Smoke: a tiny model for 2 steps (and the sgemm mode once), so that the benchmark keeps running.
// The fast kernels are checked against their references by the GoogleTest cases in tests/ops and
// tests/tensor, not here.

int run_smoke() {
  set_thread_count(0);
  const BenchConfig bc = bench_config("smoke");
  const json j = run_train(bc, 2, 0, 0);
  std::printf("%s\n", j.dump().c_str());
  {  // the bf16 path briefly: 2 training steps
    const json jb = run_train(bc, 2, 0, 0, GemmPrecision::bf16);
    std::printf("%s\n", jb.dump().c_str());
  }
  const json g = run_sgemm(bc, 0);
  (void)g;
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: normlab_bench train|sgemm CONFIG [--steps N] [--warmup N] [--threads N] "
               "[--precision float32|bf16]\n"
               "             [--bf16-kernel amx|avx512bf16|rounded_float|portable]\n"
               "             [--head-precision float32|bf16] [--lr 1e-3] [--lr-warmup 0] "
               "[--init-seed 1234] [--data-seed 42]\n"
               "       normlab_bench decode CONFIG [--prompt 128] [--tokens 128] [--threads N] "
               "[--reps 3]\n"
               "       normlab_bench --smoke\n"
               "CONFIG: a, b, c, c_matched, gqa, gqa_mha, smoke, gqa_smoke\n");
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
    int steps = 10, warmup = 3, threads = 2, prompt = 128, tokens = 128, reps = 3;
    normlab::GemmPrecision prec = normlab::GemmPrecision::float32;
    TrainKnobs knobs;
    const auto precision = [](const std::string& k, const std::string& p) {
      if (p == "bf16") return normlab::GemmPrecision::bf16;
      if (p != "float32")
        throw std::runtime_error(fmt::format("{} '{}': expected float32 or bf16", k, p));
      return normlab::GemmPrecision::float32;
    };
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string k = argv[i];
      const int v = std::atoi(argv[i + 1]);
      if (k == "--precision") {
        prec = precision(k, argv[i + 1]);
      } else if (k == "--bf16-kernel") {
        // both throw, naming the kernel: an unknown name, or one this CPU cannot run
        normlab::set_bf16_kernel(normlab::bf16_kernel_from_name(argv[i + 1]));
      } else if (mode == "train" && k == "--head-precision") {
        knobs.head_precision = precision(k, argv[i + 1]);
      } else if (mode == "train" && k == "--lr") {
        knobs.optim.lr = std::atof(argv[i + 1]);
      } else if (mode == "train" && k == "--lr-warmup") {
        knobs.optim.warmup_steps = v;
      } else if (mode == "train" && k == "--init-seed") {
        knobs.init_seed = std::strtoull(argv[i + 1], nullptr, 10);
      } else if (mode == "train" && k == "--data-seed") {
        knobs.data_seed = std::strtoull(argv[i + 1], nullptr, 10);
      } else if (k == "--steps")
        steps = v;
      else if (k == "--warmup")
        warmup = v;
      else if (k == "--threads")
        threads = v;
      else if (mode == "decode" && k == "--prompt")
        prompt = v;
      else if (mode == "decode" && k == "--tokens")
        tokens = v;
      else if (mode == "decode" && k == "--reps")
        reps = v;
      else
        return usage();
    }
    json j;
    if (mode == "train")
      j = run_train(bc, steps, warmup, threads, prec, knobs);
    else if (mode == "sgemm")
      j = run_sgemm(bc, threads);
    else if (mode == "decode")
      j = run_decode(bc, prompt, tokens, threads, reps);
    else
      return usage();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab_bench: %s\n", e.what());
    return 1;
  }
}
