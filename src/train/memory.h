// The memory a training run needs, estimated from its config before anything is allocated, and
// the check that refuses a run which cannot fit: the Trainer calls require_memory_fits before it
// builds the model, `normlab info` prints the same estimate. Sizes come from the parameter table
// (param_table.h) and the activation arena's layout (Transformer::activation_elements), so the
// estimate of each part is the size of the buffer the run allocates for it (tests/model/
// test_memory.cpp holds them equal), and the optimizer's state from its registry row
// (optimizer_state_elements). Per rank: every data-parallel rank holds all of it.
#pragma once
#include <string>

#include "normlab/config.h"

namespace normlab {

struct MemoryEstimate {
  int batch = 0, seq = 0;  // the micro-batch the activations are sized for: (B, T) per rank
  long params = 0;         // bytes of the parameters (float32, P values)
  long grads = 0;          // bytes of the gradients (P)
  long optimizer = 0;      // bytes of the optimizer's state (train/optimizer.h: AdamW 2P, Muon
                           // P for the hidden matrices and 2P for the rest)
  std::string optimizer_name;  // optim.name
  long activations = 0;    // bytes of the activation arena: activations, backward scratch and
                           // head chunks of one micro-batch
  long extra = 0;          // bytes of the run's other (P)-sized buffers: the diagnostics snapshot
                           // (diag.interval > 0), the deterministic accumulation (grad_accum > 1)
  long total() const { return params + grads + optimizer + activations + extra; }
};

MemoryEstimate estimate_memory(const Config& cfg);

// "1.50 GiB": bytes in the largest binary unit that keeps the number >= 1.
std::string format_bytes(long bytes);

// One line per part and the total, as `normlab info` prints it.
std::string describe_memory(const MemoryEstimate& e);

// Bytes this process can still allocate: MemAvailable from `meminfo` (/proc/meminfo), or the
// room left under the cgroup's limit when lower (cgroup v2: memory.max - memory.current under
// `cgroup_root`; v1: memory/memory.limit_in_bytes - memory.usage_in_bytes). -1 when neither can
// be read. `source` (if given) receives where the number came from, for messages.
long available_memory(const std::string& meminfo = "/proc/meminfo",
                      const std::string& cgroup_root = "/sys/fs/cgroup",
                      std::string* source = nullptr);

// Throws ConfigError naming the estimate, its parts and `available` when e.total() > available.
// available < 0 (unknown): no check.
void check_memory_fits(const MemoryEstimate& e, long available, const std::string& source);

// estimate_memory + available_memory + check_memory_fits; returns cfg.model, so that the Trainer
// can call it in the initializer of its model, before the model allocates.
const ModelConfig& require_memory_fits(const Config& cfg);

}  // namespace normlab
