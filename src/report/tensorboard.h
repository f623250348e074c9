// TensorBoard event files of runs (normlab's own or recorded by normlab.torch.Probe): `normlab
// report --tensorboard DIR` and `normlab export-metrics --to tensorboard`. Each run gets
// DIR/<run name>/events.out.tfevents.<seconds>.normlab (earlier event files there are replaced)
// holding, at each step line's step, every number of the line as a scalar: `loss`, `lr`, ...;
// per-layer arrays as `grad_norm_block/0`, ...; per-head as `attn_max_logit_head/<layer>/<head>`;
// per-group objects as `update_ratio/attention`; booleans (`spike`, ...) as 0 or 1. Wall times:
// the run's time_s after a start placed so that its last line falls at metrics.jsonl's
// modification time.
#pragma once
#include <string>
#include <vector>

#include "report/inputs.h"

namespace normlab::report {

struct TensorboardWritten {
  std::vector<std::string> files;  // one per run
  long events = 0, scalars = 0;
};

TensorboardWritten write_tensorboard(const ReportInputs& in, const std::string& out_dir);

}  // namespace normlab::report
