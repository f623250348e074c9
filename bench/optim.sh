#!/usr/bin/env bash
# The optimizer step, normlab vs PyTorch 2.13 on the same CPU and thread count (#36): each
# optimizer on the parameter tables of configs a and b (bench/bench_config.cpp), with random
# gradients; Muon's Newton-Schulz on its own against the same run's sgemm rate (normlab's GEMM on
# the model's training shapes: `normlab_bench sgemm`). Prints a markdown table (bench/notes.md
# keeps the measured ones).
#
#   bench/optim.sh            # CONFIGS="a b" OPTIMS="adamw muon stable_adamw adam_atan2" THREADS=2
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
CONFIGS=${CONFIGS:-"a b"}
OPTIMS=${OPTIMS:-"adamw muon stable_adamw adam_atan2"}
THREADS=${THREADS:-2}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}
cmake --build "$BUILD_DIR" --target normlab_bench >/dev/null
BENCH="$BUILD_DIR/bench/normlab_bench"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "| config | optimizer | normlab ms/step | PyTorch ms/step | PyTorch / normlab | Newton-Schulz |"
echo "|---|---|---|---|---|---|"
for c in $CONFIGS; do
  sgemm=$("$BENCH" sgemm "$c" --threads "$THREADS" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["normlab_gemm_gflops"])')
  for o in $OPTIMS; do
    "$BENCH" optim "$c" --optim "$o" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" > "$TMP/nl.json"
    if [ "$o" = muon ]; then
      "$BENCH" optim "$c" --optim muon --precision bf16 --threads "$THREADS" --steps "$STEPS" \
        --warmup "$WARMUP" > "$TMP/nl_bf16.json"
    else
      cp "$TMP/nl.json" "$TMP/nl_bf16.json"
    fi
    OMP_WAIT_POLICY=PASSIVE "$PYTHON" "$ROOT/bench/torch_optim.py" "$TMP/nl.json" --threads "$THREADS" \
      --steps "$STEPS" --warmup "$WARMUP" > "$TMP/pt.json"
    "$PYTHON" - "$TMP/nl.json" "$TMP/nl_bf16.json" "$TMP/pt.json" "$c" "$sgemm" <<'PY'
import json, sys
nl32, nl16, pt = (json.load(open(f)) for f in sys.argv[1:4])
c, sgemm = sys.argv[4], float(sys.argv[5])
for variant, ms in pt["torch"].items():
    nl = nl16 if variant == "muon_bf16" else nl32   # each peer against its own precision
    ns = ""
    if "ns_gflops" in nl:
        ns = (f"{nl['precision']}: {nl['ns_matrices']} matrices, {nl['ns_gflop']:.1f} GFLOP in "
              f"{nl['ns_ms']:.0f} ms = {nl['ns_gflops']:.0f} GFLOP/s, "
              f"{100 * nl['ns_gflops'] / sgemm:.0f}% of the run's float32 sgemm ({sgemm:.0f} GFLOP/s)")
    print(f"| {c} | {nl['optimizer']} {nl['precision']} (torch: {variant}) | {nl['step_ms']:.1f} | "
          f"{ms:.1f} | {ms / nl['step_ms']:.2f}x | {ns} |")
PY
  done
done
