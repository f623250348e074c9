#include "train/memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "model/param_table.h"
#include "model/plan.h"
#include "model/transformer.h"
#include "normlab/errors.h"
#include "train/optimizer.h"

namespace normlab {

namespace {

constexpr long kFloat = static_cast<long>(sizeof(float));

// The first number of a file, or -1 when it cannot be read or holds none ("max").
long read_number(const std::string& path) {
  std::ifstream f(path);
  long v = -1;
  if (!(f >> v)) return -1;
  return v;
}

// MemAvailable of a /proc/meminfo, in bytes; -1 when absent.
long mem_available(const std::string& meminfo) {
  std::ifstream f(meminfo);
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream in(line.substr(13));
    long kib = -1;
    std::string unit;
    if (in >> kib >> unit && unit == "kB") return kib * 1024;
    return -1;
  }
  return -1;
}

// The value of `key` in a cgroup memory.stat ("inactive_file 4096" lines); 0 when absent.
long stat_value(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  long v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

}  // namespace

MemoryEstimate estimate_memory(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  MemoryEstimate e;
  e.batch = cfg.train.batch_size;
  e.seq = m.seq_len;
  const ParamLayout layout = build_param_table(m, build_plan(m));
  const long P = layout.table.total();
  e.params = P * kFloat;
  e.grads = P * kFloat;
  e.optimizer = optimizer_state_elements(layout.table, cfg.optim) * kFloat;
  e.optimizer_name = to_string(cfg.optim.name);
  e.activations = Transformer<float>::activation_elements(m, e.batch, e.seq) * kFloat;
  int copies = 0;
  if (cfg.diag.interval > 0) ++copies;                               // Trainer: `before`
  if (cfg.dist.deterministic && cfg.train.grad_accum > 1) ++copies;  // TrainStep: grad_total_
  e.extra = copies * P * kFloat;
  return e;
}

std::string format_bytes(long bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) v /= 1024.0, ++u;
  return u == 0 ? fmt::format("{} bytes", bytes) : fmt::format("{:.2f} {}", v, units[u]);
}

std::string describe_memory(const MemoryEstimate& e) {
  std::string s = fmt::format("  parameters     {:>12}\n", format_bytes(e.params));
  s += fmt::format("  gradients      {:>12}\n", format_bytes(e.grads));
  s += fmt::format("  optimizer      {:>12}  ({} state)\n", format_bytes(e.optimizer),
                   e.optimizer_name);
  s += fmt::format("  activations    {:>12}  (incl. backward scratch, micro-batch {} x {})\n",
                   format_bytes(e.activations), e.batch, e.seq);
  if (e.extra > 0)
    s += fmt::format(
        "  other          {:>12}  (diagnostics snapshot / deterministic accumulation)\n",
        format_bytes(e.extra));
  return s;
}

long available_memory(const std::string& meminfo, const std::string& cgroup_root,
                      std::string* source) {
  long avail = mem_available(meminfo);
  std::string from = avail >= 0 ? "MemAvailable in " + meminfo : "";
  // cgroup v2, then v1; a v1 limit of "no limit" reads as a huge number, which never wins. The
  // usage counts the page cache, of which the inactive files are reclaimed before an OOM kill:
  // they count as room (as `docker stats` does).
  struct Files {
    const char *limit, *usage, *stat, *inactive;
  };
  for (const Files& c : {Files{"/memory.max", "/memory.current", "/memory.stat", "inactive_file"},
                         Files{"/memory/memory.limit_in_bytes", "/memory/memory.usage_in_bytes",
                               "/memory/memory.stat", "total_inactive_file"}}) {
    const std::string limit_file = cgroup_root + c.limit;
    const long limit = read_number(limit_file);
    if (limit < 0) continue;
    const long usage = std::max(0L, read_number(cgroup_root + c.usage) -
                                        stat_value(cgroup_root + c.stat, c.inactive));
    const long room = std::max(0L, limit - usage);
    if (avail < 0 || room < avail) {
      avail = room;
      from = "the cgroup limit " + limit_file + " less its usage";
    }
    break;
  }
  if (source) *source = from;
  return avail;
}

void check_memory_fits(const MemoryEstimate& e, long available, const std::string& source) {
  if (available < 0 || e.total() <= available) return;
  throw ConfigError({fmt::format(
      "the run needs an estimated {} of memory per rank but {} are available ({}): parameters {}, "
      "gradients {}, {} state {}, activations {} (micro-batch {} x {}){}. Make the model "
      "smaller (model.d_model, model.d_ff, model.n_layer, model.vocab_size) or the micro-batch "
      "(train.batch_size with a larger train.grad_accum, model.seq_len)",
      format_bytes(e.total()), format_bytes(available), source, format_bytes(e.params),
      format_bytes(e.grads), e.optimizer_name, format_bytes(e.optimizer),
      format_bytes(e.activations), e.batch, e.seq,
      e.extra > 0 ? fmt::format(", other buffers {}", format_bytes(e.extra)) : "")});
}

const ModelConfig& require_memory_fits(const Config& cfg) {
  std::string source;
  const long available = available_memory("/proc/meminfo", "/sys/fs/cgroup", &source);
  check_memory_fits(estimate_memory(cfg), available, source);
  return cfg.model;
}

}  // namespace normlab
