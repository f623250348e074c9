#!/usr/bin/env bash
# Finding 9, part 3 (docs/findings.md): the loss spike of benchmark config b (GPT-2 small shapes,
# V = 50,257, random tokens, lr 1e-3, AdamW) in bf16. Is it the bf16 rounding of the LM head?
# Runs bench/normlab_bench's training loop for 30 steps, every step's loss and gradient norm kept:
#   two seeds (initialisation, batches) x {float32; bf16 everywhere; bf16 blocks with a float32
#   LM head} at the benchmark's constant lr 1e-3, and float32 and bf16 with a 10-step linear
#   learning-rate warmup; then a table of each run's largest loss and gradient norm.
# About 10 minutes on 2 idle cores (b takes about 1.2 s a step in float32 on Zen 4).
# Usage: scripts/findings_b_spike.sh [OUT_DIR] (default runs/findings); needs build/bench/normlab_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}/b_spike
NB=${NORMLAB_BENCH:-build/bench/normlab_bench}
STEPS=${STEPS:-30}
mkdir -p "$OUT"
run() {  # NAME ARGS...
  local name=$1
  shift
  [ -s "$OUT/$name.json" ] || "$NB" train b --steps "$STEPS" --warmup 0 "$@" >"$OUT/$name.json"
}
for s in 1234:42 1:1; do
  init=${s%:*} data=${s#*:}
  run "seed${init}_float32" --precision float32 --init-seed "$init" --data-seed "$data"
  run "seed${init}_bf16" --precision bf16 --init-seed "$init" --data-seed "$data"
  run "seed${init}_bf16_head_float32" --precision bf16 --head-precision float32 \
    --init-seed "$init" --data-seed "$data"
done
run "warmup10_float32" --precision float32 --lr-warmup 10
run "warmup10_bf16" --precision bf16 --lr-warmup 10

python3 - "$OUT" <<'EOF' | tee "$OUT/table.md"
import json, math, os, sys
d = sys.argv[1]
print("| run | blocks / head | lr warmup | mean loss | largest loss (step) | largest gradient norm after step 2 (step) | losses above 11.1 |")
print("|---|---|---|---|---|---|---|")
for f in sorted(os.listdir(d)):
    if not f.endswith(".json"):
        continue
    j = json.load(open(os.path.join(d, f)))
    L, G = j["losses"], j["grad_norms"]
    k = max(range(len(L)), key=L.__getitem__)
    g = max(range(2, len(G)), key=G.__getitem__)
    print(f"| {f[:-5]} | {j['precision']} / {j['head_precision']} | {j['lr_warmup']} | "
          f"{sum(L) / len(L):.4f} | {L[k]:.3f} ({k + 1}) | {G[g]:.1f} ({g + 1}) | "
          f"{sum(x > 11.1 for x in L)} |")
print()
print(f"ln V = {math.log(50257):.3f} (the loss of uniform predictions on random tokens)")
EOF
