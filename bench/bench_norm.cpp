// normlab_bench norm KIND --rows N --cols C: one norm site's cost per call, forward and backward,
// through the same table of operations the model runs (model/norm_ops.h: layernorm, rmsnorm, dyt,
// derf), on random float32 inputs of N rows of C values with a unit gain. `warmup` calls, then the
// median over `steps` calls of the forward, the backward (dx overwritten, the parameter gradients
// accumulated, as in a training step) and the two together. bench/norm.sh times PyTorch's
// modules on the same shapes (bench/torch_norm.py) in the same run.
#include <chrono>

#include "bench_internal.h"
#include "model/norm_ops.h"
#include "tensor/rng.h"
#include "tensor/threading.h"

namespace normlab::bench {

json run_norm(const std::string& kind_name, long rows, int cols, int steps, int warmup,
              int threads) {
  const int nthreads = set_thread_count(threads);
  const auto kind = enum_from_string<NormKind>(kind_name);
  if (!kind) throw std::runtime_error("unknown norm kind " + kind_name);
  const NormTraits t = norm_traits(*kind);
  const long n = rows * cols;
  std::vector<float> x(n), dout(n), out(n), dx(n), mean(rows), rstd(rows);
  std::vector<float> w(cols, 0.0f), dw(cols);
  float alpha = 0.5f, shift = 0.0f, dalpha = 0, dshift = 0;
  Rng rng(7);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : dout) v = static_cast<float>(rng.normal());
  NormParams<float> p;
  p.w = w.data();
  // No bias, as the benchmark models build their sites (model.norm_bias = false).
  p.alpha = t.alpha ? &alpha : nullptr;
  p.shift = t.shift ? &shift : nullptr;
  p.eps = 1e-5f;
  p.g0 = 1.0f;
  NormGrads<float> g;
  g.dw = dw.data();
  g.dalpha = t.alpha ? &dalpha : nullptr;
  g.dshift = t.shift ? &dshift : nullptr;
  const NormOps<float>& ops = norm_ops<float>(*kind);
  std::vector<double> fwd, bwd;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    ops.forward(out.data(), mean.data(), rstd.data(), x.data(), p, rows, cols);
    const auto t1 = Clock::now();
    ops.backward(dx.data(), g, dout.data(), x.data(), mean.data(), rstd.data(), p, rows, cols,
                 ops::Accum::overwrite, nullptr);
    const auto t2 = Clock::now();
    if (s < warmup) continue;
    fwd.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    bwd.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
  }
  std::vector<double> both(fwd.size());
  for (std::size_t i = 0; i < fwd.size(); ++i) both[i] = fwd[i] + bwd[i];
  double check = 0;  // keeps the results live
  for (long i = 0; i < n; i += 997) check += out[i] + dx[i];
  return {{"impl", "normlab"},   {"kind", kind_name},      {"rows", rows},
          {"cols", cols},        {"threads", nthreads},    {"steps", steps},
          {"fwd_us", median(fwd)}, {"bwd_us", median(bwd)}, {"total_us", median(both)},
          {"checksum", check}};
}

}  // namespace normlab::bench
