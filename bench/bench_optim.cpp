// normlab_bench optim CONFIG --optim NAME: the optimizer step of one optimizer on a benchmark
// model's parameter table (#36): random parameters and gradients, `warmup` updates, then the
// median over `steps` updates of Optimizer::update (the clip factor 1 path). For Muon also the
// Newton-Schulz iterations on their own, per matrix shape, with their FLOPs:
//   per iteration on X (m, n), m <= n:  X X^T 2 m^2 n,  A A 2 m^3,  B X 2 m^2 n
// so that their rate can be set against the sgemm rate of the same run (bench/optim.sh).
// The parameter shapes go out with the result, so that bench/torch_optim.py steps PyTorch's
// optimizers on the same tensors.
#include <chrono>

#include "bench_internal.h"
#include "model/param_table.h"
#include "model/plan.h"
#include "tensor/rng.h"
#include "tensor/threading.h"
#include "train/optimizer.h"
#include "train/optimizers/muon.h"
#include "train/optimizers/newton_schulz.h"

namespace normlab::bench {

namespace {
double seconds(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

json run_optim(const BenchConfig& bc, const std::string& name, int steps, int warmup, int threads,
               GemmPrecision prec) {
  const int nthreads = set_thread_count(threads);
  OptimConfig oc;
  const auto kind = enum_from_string<OptimizerKind>(name);
  if (!kind) throw std::runtime_error("unknown optimizer " + name);
  oc.name = *kind;
  const ParamLayout layout = build_param_table(bc.model, build_plan(bc.model));
  const ParamTable& table = layout.table;
  std::vector<float> params(table.total()), grads(table.total());
  Rng rng(11);
  for (auto& x : params) x = static_cast<float>(0.02 * rng.normal());
  for (auto& x : grads) x = static_cast<float>(1e-3 * rng.normal());
  const std::vector<float> g0 = grads;
  const auto opt = make_optimizer<float>(table, oc, bc.model);
  opt->set_matmul_precision(prec);
  std::vector<double> times;
  for (int s = 0; s < warmup + steps; ++s) {
    std::copy(g0.begin(), g0.end(), grads.begin());  // the step writes clipped gradients back
    const double t = seconds([&] { opt->update(params, grads, 1e-3, 1.0); });
    if (s >= warmup) times.push_back(t);
  }
  json shapes = json::array();
  for (const ParamSpec& s : table.specs())
    shapes.push_back({{"name", s.name}, {"shape", s.shape}, {"row_blocks", s.row_blocks},
                      {"decay", s.decay}, {"matrix", s.hidden_matrix()}});
  json j = {{"config", bc.name}, {"optimizer", name}, {"threads", nthreads},
            {"precision", prec == GemmPrecision::bf16 ? "bf16" : "float32"},
            {"step_ms", 1e3 * median(times)}, {"params", table.total()}, {"shapes", shapes}};
  if (oc.name == OptimizerKind::muon) {
    const MuonSettings mu = MuonSettings::of(oc);
    // Newton-Schulz alone on every matrix of the table, as the update runs it.
    double flops = 0;
    std::vector<std::pair<long, long>> blocks;
    long max_elems = 0, max_short = 0;
    for (const ParamSpec& s : table.specs()) {
      if (!s.hidden_matrix()) continue;
      for (const auto rows : s.row_blocks.empty() ? std::vector<std::int64_t>{s.shape[0]} : s.row_blocks) {
        blocks.push_back({rows, s.shape[1]});
        const double m = std::min<double>(rows, s.shape[1]), n = std::max<double>(rows, s.shape[1]);
        flops += mu.ns_steps * (4 * m * m * n + 2 * m * m * m);
        max_elems = std::max<long>(max_elems, rows * s.shape[1]);
        max_short = std::max<long>(max_short, static_cast<long>(m));
      }
    }
    NewtonSchulz<float> ns;
    ns.reserve(max_elems, max_short);
    std::vector<float> in(max_elems), out(max_elems);
    for (auto& x : in) x = static_cast<float>(rng.normal());
    const NsCoefficients k{mu.ns_a, mu.ns_b, mu.ns_c, mu.ns_steps, mu.ns_eps};
    std::vector<double> ns_times;
    for (int s = 0; s < warmup + steps; ++s) {
      const double t = seconds([&] {
        for (const auto& [r, c] : blocks)
          ns.run(in.data(), out.data(), static_cast<int>(r), static_cast<int>(c), k,
                 prec);
      });
      if (s >= warmup) ns_times.push_back(t);
    }
    const double t = median(ns_times);
    j["ns_ms"] = 1e3 * t;
    j["ns_gflop"] = flops / 1e9;
    j["ns_gflops"] = flops / t / 1e9;
    j["ns_matrices"] = blocks.size();
  }
  return j;
}

}  // namespace normlab::bench
