// The memory estimate of a run (train/memory.h) against the buffers a run allocates, and the
// refusal of a run that cannot fit, with the available memory given (no dependence on this
// machine) or read from stand-in /proc/meminfo and cgroup files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "fixtures.h"
#include "train/memory.h"
#include "model/transformer.h"
#include "normlab/config_file.h"
#include "normlab/errors.h"
#include "normlab/trainer.h"
#include "train/optimizer.h"

namespace normlab {
namespace {

namespace fs = std::filesystem;

// Exact: each part of the estimate is the size of the buffer a run allocates for it.
TEST(MemoryEstimate, EqualsTheBuffersOfTinyModels) {
  for (int variant = 0; variant < 6; ++variant) {
    Config cfg = test::tiny_run(1);
    cfg.model.placement = variant == 0   ? Placement::post
                          : variant == 1 ? Placement::peri
                                         : Placement::pre;
    cfg.model.pos = variant == 2 ? PosKind::learned : PosKind::rope;
    cfg.model.tie_embeddings = variant != 3;
    cfg.model.mlp = variant == 3 ? MlpKind::swiglu : MlpKind::gelu;
    cfg.model.qk_norm = variant == 1 ? QKNormKind::rmsnorm : QKNormKind::none;
    cfg.train.batch_size = 1 + variant;
    cfg.optim.name = static_cast<OptimizerKind>(variant);  // each optimizer once
    set_key(cfg, "optim.soap.max_precond_dim", "64");  // SOAP: no (V, V) statistics for the embedding
    const MemoryEstimate e = estimate_memory(cfg);
    Transformer<float> model(cfg.model, cfg.train.batch_size, cfg.model.seq_len);
    const auto opt = make_optimizer<float>(model.table(), cfg.optim, cfg.model);
    long state = 0;
    for (const StateArena<float>* a : std::as_const(*opt).state()) state += a->data.size();
    const long f = sizeof(float);
    EXPECT_EQ(e.params, static_cast<long>(model.params().size()) * f) << variant;
    EXPECT_EQ(e.grads, static_cast<long>(model.grads().size()) * f) << variant;
    EXPECT_EQ(e.optimizer, state * f) << variant;
    EXPECT_EQ(e.optimizer_name, to_string(cfg.optim.name)) << variant;
    EXPECT_EQ(e.activations, model.activation_elements() * f) << variant;
    EXPECT_EQ(e.extra, 0) << variant;
    EXPECT_EQ(e.total(), e.params + e.grads + e.optimizer + e.activations);
    EXPECT_EQ(e.batch, cfg.train.batch_size);
    EXPECT_EQ(e.seq, cfg.model.seq_len);
  }
}

TEST(MemoryEstimate, CountsTheRunsOtherParameterSizedBuffers) {
  Config cfg = test::tiny_run(1);
  const long p = estimate_memory(cfg).params;
  cfg.diag.interval = 10;  // the Trainer keeps the parameters before each diagnostic step
  EXPECT_EQ(estimate_memory(cfg).extra, p);
  cfg.dist.deterministic = true;
  cfg.train.grad_accum = 2;  // TrainStep sums the micro-batches' gradients apart
  EXPECT_EQ(estimate_memory(cfg).extra, 2 * p);
}

TEST(MemoryEstimate, ActivationsGrowWithTheMicroBatch) {
  Config cfg = test::tiny_run(1);
  const MemoryEstimate a = estimate_memory(cfg);
  cfg.train.batch_size *= 2;
  const MemoryEstimate b = estimate_memory(cfg);
  EXPECT_GT(b.activations, a.activations);
  EXPECT_EQ(b.params, a.params);
}

std::string error_of(const MemoryEstimate& e, long available) {
  try {
    check_memory_fits(e, available, "MemAvailable in /proc/meminfo");
  } catch (const ConfigError& err) {
    return err.what();
  }
  return "";
}

TEST(MemoryCheck, RefusesARunLargerThanTheAvailableMemory) {
  const MemoryEstimate e = estimate_memory(test::tiny_run(1));
  EXPECT_EQ(error_of(e, e.total()), "");      // exactly fits
  EXPECT_EQ(error_of(e, -1), "");             // unknown: no check
  const std::string msg = error_of(e, e.total() - 1);
  ASSERT_NE(msg, "");
  for (const std::string& part :
       {"needs an estimated " + format_bytes(e.total()) + " of memory per rank",
        format_bytes(e.total() - 1) + " are available (MemAvailable in /proc/meminfo)",
        "parameters " + format_bytes(e.params), "adamw state " + format_bytes(e.optimizer),
        "activations " + format_bytes(e.activations), std::string("train.batch_size")})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
}

TEST(MemoryCheck, FormatsBytesInBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 bytes");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3L << 40), "3.00 TiB");
}

// Writes `text` to dir/name (creating the folders).
void write_text(const fs::path& dir, const std::string& name, const std::string& text) {
  fs::create_directories((dir / name).parent_path());
  std::ofstream(dir / name) << text;
}

TEST(MemoryCheck, ReadsMemAvailableAndTheCgroupLimit) {
  const fs::path d = test::temp_dir("memory_files");
  const std::string meminfo = (d / "meminfo").string(), v2 = (d / "v2").string(),
                    v1 = (d / "v1").string(), none = (d / "none").string();
  write_text(d, "meminfo", "MemTotal:       16000 kB\nMemFree:  100 kB\nMemAvailable:    1000 kB\n");
  std::string source;
  EXPECT_EQ(available_memory(meminfo, none, &source), 1000 * 1024L);
  EXPECT_NE(source.find("MemAvailable"), std::string::npos) << source;
  // cgroup v2: limit 800000, usage 500000 of which 100000 reclaimable page cache.
  write_text(d, "v2/memory.max", "800000\n");
  write_text(d, "v2/memory.current", "500000\n");
  write_text(d, "v2/memory.stat", "anon 400000\nfile 100000\ninactive_file 100000\n");
  EXPECT_EQ(available_memory(meminfo, v2, &source), 400000);
  EXPECT_NE(source.find("memory.max"), std::string::npos) << source;
  // No limit: MemAvailable stands.
  write_text(d, "v2/memory.max", "max\n");
  EXPECT_EQ(available_memory(meminfo, v2, &source), 1000 * 1024L);
  // cgroup v1.
  write_text(d, "v1/memory/memory.limit_in_bytes", "600000\n");
  write_text(d, "v1/memory/memory.usage_in_bytes", "100000\n");
  write_text(d, "v1/memory/memory.stat", "inactive_file 5\ntotal_inactive_file 50000\n");
  EXPECT_EQ(available_memory(meminfo, v1, &source), 550000);
  EXPECT_NE(source.find("memory.limit_in_bytes"), std::string::npos) << source;
  // Neither readable: unknown.
  EXPECT_EQ(available_memory((d / "nope").string(), none), -1);
  fs::remove_all(d);
}

// The Trainer checks before it allocates: a model of 3 TiB is refused with the estimate rather
// than dying of std::bad_alloc (no machine this runs on has 3 TiB available).
TEST(MemoryCheck, TrainerRefusesARunThatCannotFit) {
  Config cfg = test::tiny_run(1);
  cfg.model.d_model = 65536;
  cfg.model.d_ff = 262144;
  const std::string dir = test::temp_dir("memory_trainer");
  try {
    Trainer t(cfg, dir, false);
    FAIL() << "the Trainer accepted a run of " << format_bytes(estimate_memory(cfg).total());
  } catch (const ConfigError& e) {
    const std::string needs = "needs an estimated " + format_bytes(estimate_memory(cfg).total());
    EXPECT_NE(std::string(e.what()).find(needs), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace normlab
