// normlab_bench: training throughput of normlab on fixed model shapes, and the achievable sgemm
// rate on the same model's GEMM shapes, as JSON on stdout. bench/run.sh runs every mode in a fresh
// process (so peak-memory figures do not mix), runs bench/torch_bench.py on the same models and
// writes docs/benchmarks.md.
//
//   normlab_bench train CONFIG [--steps 10] [--warmup 3] [--threads 2] [--precision float32|bf16]
//   normlab_bench sgemm CONFIG [--threads 2]
//   normlab_bench decode CONFIG [--prompt 128] [--tokens 128] [--threads 2] [--reps 3]
//   normlab_bench optim CONFIG --optim NAME [--steps 10] [--warmup 3] [--threads 2]
//   normlab_bench norm KIND [--rows 2048] [--cols 384] [--steps 50] [--warmup 10] [--threads 2]
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
// The modes are in bench_train_steps.cpp (train), bench_sgemm.cpp and bench_decode.cpp; the
// configurations and the FLOP count per token in bench_config.cpp.
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "bench_internal.h"
#include "tensor/gemm_bf16.h"
#include "tensor/threading.h"

namespace normlab::bench {
namespace {

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
               "       normlab_bench optim CONFIG --optim adamw|muon|stable_adamw|adam_atan2 "
               "[--steps N] [--warmup N] [--threads N] [--precision float32|bf16]\n"
               "       normlab_bench norm layernorm|rmsnorm|dyt|derf [--rows 2048] [--cols 384] "
               "[--steps 50] [--warmup 10] [--threads N]\n"
               "       normlab_bench --smoke\n"
               "CONFIG: a, b, c, c_matched, gqa, gqa_mha, smoke, gqa_smoke\n");
  return 2;
}

// normlab_bench norm KIND [--rows N] [--cols C] [--steps N] [--warmup N] [--threads N]
int run_norm_mode(int argc, char** argv) {
  long rows = 2048;
  int cols = 384, steps = 50, warmup = 10, threads = 2;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (k == "--rows") rows = v;
    else if (k == "--cols") cols = static_cast<int>(v);
    else if (k == "--steps") steps = static_cast<int>(v);
    else if (k == "--warmup") warmup = static_cast<int>(v);
    else if (k == "--threads") threads = static_cast<int>(v);
    else return usage();
  }
  std::printf("%s\n", run_norm(argv[2], rows, cols, steps, warmup, threads).dump().c_str());
  return 0;
}

}  // namespace
}  // namespace normlab::bench

int main(int argc, char** argv) {
  using namespace normlab::bench;
  try {
    if (argc >= 2 && std::strcmp(argv[1], "--smoke") == 0) return run_smoke();
    if (argc < 3) return usage();
    const std::string mode = argv[1];
    if (mode == "norm") return run_norm_mode(argc, argv);
    const BenchConfig bc = bench_config(argv[2]);
    int steps = 10, warmup = 3, threads = 2, prompt = 128, tokens = 128, reps = 3;
    normlab::GemmPrecision prec = normlab::GemmPrecision::float32;
    TrainKnobs knobs;
    std::string optim = "adamw";
    const auto precision = [](const std::string& k, const std::string& p) {
      if (p == "bf16") return normlab::GemmPrecision::bf16;
      if (p != "float32")
        throw std::runtime_error(fmt::format("{} '{}': expected float32 or bf16", k, p));
      return normlab::GemmPrecision::float32;
    };
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string k = argv[i];
      const int v = std::atoi(argv[i + 1]);
      if (mode == "optim" && k == "--optim") {
        optim = argv[i + 1];
      } else if (k == "--precision") {
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
    else if (mode == "optim")
      j = run_optim(bc, optim, steps, warmup, threads, prec);
    else
      return usage();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "normlab_bench: %s\n", e.what());
    return 1;
  }
}
