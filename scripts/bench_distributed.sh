#!/usr/bin/env bash
# 1 rank x 2 threads vs 2 ranks x 1 thread on this machine, same global batch (16 x 128 tokens),
# the model of configs/compare.toml (pre-norm). Prints tokens/s and all-reduce time per step.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d)
COMMON=(--config configs/compare.toml --set model.placement=pre --set train.steps=40
        --set train.log_interval=40 --set train.eval_interval=0 --set train.checkpoint_interval=0
        --set diag.interval=0)
build/normlab train --out "$OUT/one" "${COMMON[@]}" --set train.batch_size=16 --set train.threads=2 >/dev/null
mpirun --allow-run-as-root --oversubscribe -np 2 build/normlab train --out "$OUT/two" "${COMMON[@]}" \
  --set train.batch_size=8 --set train.threads=1 >/dev/null
python3 - "$OUT" <<'PY'
import json, sys
for name in ("one", "two"):
    last = [j for j in map(json.loads, open(f"{sys.argv[1]}/{name}/metrics.jsonl")) if "event" not in j][-1]
    print(f"{'1 rank x 2 threads' if name == 'one' else '2 ranks x 1 thread'}: "
          f"{last['tokens_per_s']:.0f} tokens/s"
          + (f", all-reduce {last['comm_ms_per_step']:.2f} ms/step" if "comm_ms_per_step" in last else ""))
PY
rm -rf "$OUT"
