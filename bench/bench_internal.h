// Internal to normlab_bench (bench/bench_*.cpp): the benchmark's model configurations, the
// process measurements and FLOP count they share (bench_config.cpp), and the three modes, each
// returning its JSON record: train (bench_train_steps.cpp), sgemm (bench_sgemm.cpp) and decode
// (bench_decode.cpp). bench_train.cpp parses the command line and prints the record.
#pragma once
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "normlab/config.h"
#include "tensor/gemm_bf16.h"

namespace normlab::bench {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchConfig {
  std::string name, description;
  ModelConfig model;
  int batch = 8;
  double z_loss = 0;
};

// One of the named configurations (see bench_train.cpp); throws on an unknown name.
BenchConfig bench_config(const std::string& name);

double peak_rss_mb();  // MiB
double rss_mb();       // MiB
double cpu_seconds();  // of the process, all threads, user + system
double median(std::vector<double> v);
bool gated(MlpKind m);
// Weights that take part in matrix products, per the FLOP formula in bench_config.cpp.
long matmul_params(const ModelConfig& m);
double flops_per_token(const ModelConfig& m);

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

// The modes: each returns its JSON record (what bench/report.py reads).
json run_train(const BenchConfig& bc, int steps, int warmup, int threads,
               GemmPrecision prec = GemmPrecision::float32, const TrainKnobs& knobs = {});
json run_sgemm(const BenchConfig& bc, int threads);
json run_optim(const BenchConfig& bc, const std::string& optimizer, int steps, int warmup,
               int threads, GemmPrecision prec);
json run_decode(const BenchConfig& bc, int prompt_len, int tokens, int threads, int reps);
// One norm site per call (bench_norm.cpp); no model configuration.
json run_norm(const std::string& kind, long rows, int cols, int steps, int warmup, int threads);

}  // namespace normlab::bench
