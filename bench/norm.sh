#!/usr/bin/env bash
# One norm site per call, normlab against PyTorch (eager and torch.compile) on the same CPU, in one
# run: LayerNorm, RMSNorm, DyT and Derf, forward + backward on ROWS x COLS float32 (#37: DyT keeps
# no row statistics, so it should cost less per call than a norm that reduces each row).
#
#   bench/norm.sh              # prints a markdown table (docs/benchmarks.md, "Norm kinds per call")
#
# Environment (all optional): BUILD_DIR=build  ROUNDS=3  THREADS=2  STEPS=50  WARMUP=10
#   SHAPES="2048x384 2048x768"  (rows x cols: config a's activations, B 8 x T 256, at C 384 and 768)
#   KINDS="layernorm rmsnorm dyt derf"  COMPILE=1  PYTHON=.venv/bin/python
# Each round runs every shape and kind with its three implementations back to back, odd rounds
# normlab first, even rounds PyTorch first; the table shows the medians over rounds.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
STEPS=${STEPS:-50}
WARMUP=${WARMUP:-10}
SHAPES=${SHAPES:-"2048x384 2048x768"}
KINDS=${KINDS:-"layernorm rmsnorm dyt derf"}
COMPILE=${COMPILE:-1}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$ROOT/.venv/bin/python" ] && PYTHON="$ROOT/.venv/bin/python"
fi
cmake --build "$BUILD_DIR" --target normlab_bench >/dev/null
BENCH="$BUILD_DIR/bench/normlab_bench"
RESULTS=$(mktemp -d)
trap 'rm -rf "$RESULTS"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for shape in $SHAPES; do
    rows=${shape%x*} cols=${shape#*x}
    for kind in $KINDS; do
      args=(--rows "$rows" --cols "$cols" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS")
      impls=(normlab eager)
      [ "$COMPILE" = 1 ] && impls+=(compile)
      [ $((r % 2)) = 0 ] && impls=($(printf '%s\n' "${impls[@]}" | tac))
      for impl in "${impls[@]}"; do
        case $impl in
          normlab) "$BENCH" norm "$kind" "${args[@]}" ;;
          eager) env OMP_WAIT_POLICY=PASSIVE "$PYTHON" "$ROOT/bench/torch_norm.py" "$kind" "${args[@]}" ;;
          compile) env OMP_WAIT_POLICY=PASSIVE "$PYTHON" "$ROOT/bench/torch_norm.py" "$kind" "${args[@]}" --compile ;;
        esac >>"$RESULTS/all.jsonl"
      done
    done
  done
done
"$PYTHON" - "$RESULTS/all.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = {}
for r in rows:
    med.setdefault((r["rows"], r["cols"], r["kind"], r["impl"]), []).append(r["total_us"])
med = {k: statistics.median(v) for k, v in med.items()}
impls = [i for i in ("normlab", "eager", "compile") if any(k[3] == i for k in med)]
print("| shape | kind | " + " | ".join(f"{i} (µs)" for i in impls)
      + " | " + " | ".join(f"{i} / normlab" for i in impls[1:])
      + " | " + " | ".join(f"{i}: kind / rmsnorm" for i in impls) + " |")
print("|" + "---|" * (2 + 2 * len(impls) + len(impls) - 1))
for (n, c) in sorted({(k[0], k[1]) for k in med}):
    for kind in ("layernorm", "rmsnorm", "dyt", "derf"):
        if (n, c, kind, "normlab") not in med:
            continue
        t = [med.get((n, c, kind, i)) for i in impls]
        ratio = [f"{x / t[0]:.2f}" for x in t[1:]]
        rel = [f"{med[(n, c, kind, i)] / med[(n, c, 'rmsnorm', i)]:.2f}"
               if (n, c, "rmsnorm", i) in med else "" for i in impls]
        print(f"| {n} x {c} | {kind} | " + " | ".join(f"{x:.0f}" for x in t) + " | "
              + " | ".join(ratio) + " | " + " | ".join(rel) + " |")
PY
