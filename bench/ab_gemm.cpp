// ab_gemm: two builds of normlab's GEMM kernels in one process, called in alternation, so that a
// change to a kernel can be measured on a machine whose speed drifts by more than the change
// (bench/notes.md, item 9). bench/ab_gemm.sh compiles src/tensor of a git revision ("base") and of
// the working tree ("work") under two namespaces and links them with this driver.
//
//   ab_gemm M N K TA TB [float|bf16] [REPS] [THREADS] [warm|cold]
//
// Prints the best GFLOP/s of each over REPS alternated calls (C = op(A) op(B), beta 1 when TA as
// the weight gradients accumulate, else 0), and whether the two results are bitwise equal. cold:
// every call reads another copy of B (copies of at least 256 MiB in all, more than any L3 here),
// so that B comes from memory, as the weights do in a training step; warm (the default): the same
// B every call, in cache after the first.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using Gemm = void (*)(int, int, int, int, int, const float*, int, const float*, int, float, float*,
                      int, int, int);
extern "C" void ab_gemm_base(int, int, int, int, int, const float*, int, const float*, int, float,
                             float*, int, int, int);
extern "C" void ab_gemm_work(int, int, int, int, int, const float*, int, const float*, int, float,
                             float*, int, int, int);

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: ab_gemm M N K TA TB [float|bf16] [REPS] [THREADS] [warm|cold]\n");
    return 2;
  }
  const int M = std::atoi(argv[1]), N = std::atoi(argv[2]), K = std::atoi(argv[3]);
  const int ta = std::atoi(argv[4]), tb = std::atoi(argv[5]);
  const int bf16 = argc > 6 && std::string(argv[6]) == "bf16";
  const int reps = argc > 7 ? std::atoi(argv[7]) : 15, threads = argc > 8 ? std::atoi(argv[8]) : 1;
  const std::string mode = argc > 9 ? argv[9] : "warm";
  if (M <= 0 || N <= 0 || K <= 0 || reps <= 0 || threads <= 0 ||
      (mode != "warm" && mode != "cold")) {
    std::fprintf(stderr,
                 "ab_gemm: M, N, K, REPS and THREADS must be positive, the mode warm or cold\n");
    return 2;
  }
  std::mt19937 g(1);
  std::normal_distribution<float> nd;
  std::vector<float> A(static_cast<long>(M) * K);
  std::vector<float> C0(static_cast<long>(M) * N, 0.f), C1(C0);
  // B, and in cold mode copies of it filling 256 MiB (at least 2), each call reading the next one.
  const long bsize = static_cast<long>(K) * N;
  const long cold_copies = ((256L << 20) / static_cast<long>(sizeof(float)) + bsize - 1) / bsize;
  const long copies = mode == "cold" ? std::max(2L, cold_copies) : 1;
  std::vector<float> Bs(bsize * copies);
  for (auto& x : A) x = nd(g);
  for (long i = 0; i < bsize; ++i) Bs[i] = nd(g);
  for (long c = 1; c < copies; ++c) std::copy_n(Bs.begin(), bsize, Bs.begin() + c * bsize);
  long call = 0;
  const int lda = ta ? M : K, ldb = tb ? K : N;
  const float beta = ta ? 1.f : 0.f;
  const Gemm f[2] = {ab_gemm_base, ab_gemm_work};
  std::vector<float>* C[2] = {&C0, &C1};
  double best[2] = {1e30, 1e30};
  for (int r = 0; r < reps; ++r)
    for (int v = 0; v < 2; ++v) {
      std::fill(C[v]->begin(), C[v]->end(), 0.f);
      const auto t0 = std::chrono::steady_clock::now();
      const float* b = Bs.data() + (call++ % copies) * bsize;
      f[v](ta, tb, M, N, K, A.data(), lda, b, ldb, beta, C[v]->data(), N, bf16, threads);
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[v] = std::min(best[v], dt);
    }
  const double flops = 2.0 * M * N * K;
  const bool same = std::memcmp(C0.data(), C1.data(), sizeof(float) * C0.size()) == 0;
  std::printf("%dx%dx%d ta%d tb%d %s %s: base %.1f work %.1f GFLOP/s (work/base %.3f), "
              "results %s\n",
              M, N, K, ta, tb, bf16 ? "bf16" : "float", mode.c_str(), flops / best[0] / 1e9,
              flops / best[1] / 1e9, best[0] / best[1], same ? "bitwise equal" : "DIFFER");
  return 0;
}
