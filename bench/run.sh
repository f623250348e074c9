#!/usr/bin/env bash
# Training throughput, normlab vs PyTorch on the same CPU, side by side in one run.
#
#   bench/run.sh                      # build dir ./build, 3 rounds, configs a b c c_matched, writes docs/benchmarks.md
#
# Environment (all optional):
#   BUILD_DIR=build      where normlab_bench is built (cmake --build "$BUILD_DIR" --target normlab_bench)
#   ROUNDS=3             rounds; each round runs every configuration and implementation once, a
#                        configuration's runs back to back (below); the table shows medians
#   CONFIGS="a b c c_matched"  which configurations (bench/bench_config.cpp, docs/benchmarks.md)
#   THREADS=2            threads for normlab and torch.set_num_threads
#   STEPS=10 WARMUP=3    timed steps (median reported) after warm-up steps
#   COMPILE=1            also torch.compile (0: skip)
#   AUTOCAST=1           also PyTorch's bf16 autocast, the peer of normlab bf16 (0: skip): eager, and
#                        compiled when COMPILE=1
#   AUTOCAST_STEPS=$STEPS AUTOCAST_WARMUP=$WARMUP  the autocast runs' timed and warm-up steps: fewer
#                        on a CPU without AVX512-BF16 or AMX, where PyTorch 2.13's bf16 matrix
#                        products run at about 1 GFLOP/s (Zen 1: 37.6 s for one step of a), so that
#                        a round takes minutes, not an hour; the report's Details give each run's
#                        steps
#   NICE=                e.g. -20 (root): run every benchmark process at that priority, alike
#   PYTHON=              the interpreter with torch==2.13.0 (default: .venv/bin/python if present, else python3)
#   OUT=docs/benchmarks.md   the report; RESULTS=$BUILD_DIR/bench-results  the raw JSON
#   STORE=bench/results  the per-CPU result files the report writes (<cpu key>.json, replacing this
#                        CPU's earlier one) and lists at the top of the report; commit the new file
#
# normlab also runs with --precision bf16 (bf16 matmul inputs, fp32 accumulation: the AVX512-BF16
# kernel, or on a CPU without it the float32 kernel on bf16-rounded copies) as
# normlab_bf16_<config>_r<round>.
# After torch.compile come PyTorch's own mixed-precision peers (torch_bench.py --autocast:
# torch.autocast("cpu", dtype=torch.bfloat16) around forward and loss, fp32 master weights) as
# autocast_<config>_r<round> and, with COMPILE=1, autocast_compile_<config>_r<round>.
# The CPU (bench/cpuinfo.py: model, family/model, flags, generation, VM) goes to $RESULTS/cpu.json.
#
# Every measurement runs in a fresh process, so that peak-memory figures do not mix. PyTorch runs
# with OMP_WAIT_POLICY=PASSIVE; normlab needs no environment variable.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
CONFIGS=${CONFIGS:-"a b c c_matched"}
THREADS=${THREADS:-2}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
COMPILE=${COMPILE:-1}
AUTOCAST=${AUTOCAST:-1}
AUTOCAST_STEPS=${AUTOCAST_STEPS:-$STEPS}
AUTOCAST_WARMUP=${AUTOCAST_WARMUP:-$WARMUP}
STORE=${STORE:-$ROOT/bench/results}
NICE=${NICE:-}
OUT=${OUT:-$ROOT/docs/benchmarks.md}
RESULTS=${RESULTS:-$BUILD_DIR/bench-results}
# The test environment's interpreter (scripts/install-deps.sh puts torch==2.13.0 there), if any.
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$ROOT/.venv/bin/python" ] && PYTHON="$ROOT/.venv/bin/python"
fi

cmake --build "$BUILD_DIR" --target normlab_bench >/dev/null
BENCH="$BUILD_DIR/bench/normlab_bench"
[ -x "$BENCH" ] || { echo "run.sh: $BENCH not found (configure $BUILD_DIR first)" >&2; exit 1; }

rm -rf "$RESULTS" && mkdir -p "$RESULTS"
HAS_AVX512=0
grep -qw avx512f /proc/cpuinfo 2>/dev/null && HAS_AVX512=1
prio=()
[ -n "$NICE" ] && prio=(nice -n "$NICE")
"$PYTHON" "$ROOT/bench/cpuinfo.py" --out "$RESULTS/cpu.json" ||
  echo "run.sh: bench/cpuinfo.py failed; the report reads the CPU of the machine it runs on" >&2

# run NAME CMD...: stdout (one JSON object) to $RESULTS/NAME.json, stderr to NAME.log; a failure
# is recorded as {"error": ...} so that the table shows it instead of hiding it.
run() {
  local name=$1
  shift
  echo "  $name" >&2
  local status=0
  "${prio[@]}" "$@" >"$RESULTS/$name.json" 2>"$RESULTS/$name.log" || status=$?
  if [ "$status" != 0 ]; then
    local msg
    msg=$(tail -n 3 "$RESULTS/$name.log" | tr '\n"\\' '   ' | cut -c1-300)
    printf '{"error": "exit status %s: %s"}\n' "$status" "$msg" >"$RESULTS/$name.json"
  fi
}

# Each round takes the configurations one after the other and runs all of a configuration's
# measurements back to back: the sgemm rates (the MFU denominator), then normlab float32 with
# PyTorch's float32 eager and compiled, then normlab bf16 with PyTorch's autocast peers, so
# that the runs a ratio compares are seconds to about two minutes apart, not the many minutes that
# separate them when each kind runs over every configuration first. The machines this runs on
# drift by up to 2x within minutes (bench/notes.md), and with kind after kind normlab's runs all
# fell in one part of a round and PyTorch's in another. Odd rounds run normlab first, even rounds
# PyTorch first, so that neither always takes the earlier minute.
impls() {  # the measurements of config $1 in round $2, in the order of that round: each normlab
  # precision next to its PyTorch peers
  local c=$1 r=$2 list=(normlab eager)
  [ "$COMPILE" = 1 ] && list+=(compile)
  list+=(normlab_bf16)
  [ "$AUTOCAST" = 1 ] && list+=(autocast)
  [ "$AUTOCAST" = 1 ] && [ "$COMPILE" = 1 ] && list+=(autocast_compile)
  if [ $((r % 2)) = 0 ]; then
    local rev=()
    for ((i = ${#list[@]} - 1; i >= 0; i--)); do rev+=("${list[i]}"); done
    list=("${rev[@]}")
  fi
  echo "${list[@]}"
}
measure() {  # measure KIND CONFIG ROUND
  local kind=$1 c=$2 r=$3
  local torch=(env OMP_WAIT_POLICY=PASSIVE "$PYTHON" "$ROOT/bench/torch_bench.py" "$c"
    --threads "$THREADS")
  local steps=(--steps "$STEPS" --warmup "$WARMUP")
  local ac_steps=(--steps "$AUTOCAST_STEPS" --warmup "$AUTOCAST_WARMUP")
  local nl=("$BENCH" train "$c" "${steps[@]}" --threads "$THREADS")
  case $kind in
    normlab) run "normlab_${c}_r$r" "${nl[@]}" ;;
    normlab_bf16) run "normlab_bf16_${c}_r$r" "${nl[@]}" --precision bf16 ;;
    eager) run "eager_${c}_r$r" "${torch[@]}" "${steps[@]}" ;;
    compile) run "compile_${c}_r$r" "${torch[@]}" "${steps[@]}" --compile ;;
    autocast) run "autocast_${c}_r$r" "${torch[@]}" "${ac_steps[@]}" --autocast ;;
    autocast_compile) run "autocast_compile_${c}_r$r" "${torch[@]}" "${ac_steps[@]}" --autocast --compile ;;
  esac
}
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  for c in $CONFIGS; do
    # OMP_WAIT_POLICY only concerns oneDNN (OpenMP), when the benchmark is built with it.
    run "sgemm_${c}_r$r" env OMP_WAIT_POLICY=PASSIVE "$BENCH" sgemm "$c" --threads "$THREADS"
    # The BLAS's own AVX-512 kernel, which its CPU detection does not pick on some AVX-512 CPUs by
    # itself (on a CPU without AVX-512 it would stop on an illegal instruction: skipped).
    if [ "$HAS_AVX512" = 1 ]; then
      run "sgemm_skx_${c}_r$r" env OPENBLAS_CORETYPE=SkylakeX "$BENCH" sgemm "$c" --threads "$THREADS"
    fi
    for kind in $(impls "$c" "$r"); do measure "$kind" "$c" "$r"; done
  done
done

cmd="bench/run.sh"
for v in ROUNDS CONFIGS THREADS STEPS WARMUP COMPILE AUTOCAST AUTOCAST_STEPS AUTOCAST_WARMUP NICE; do
  case $v in
    ROUNDS) d=3 ;; CONFIGS) d="a b c c_matched" ;; THREADS) d=2 ;; STEPS) d=10 ;; WARMUP) d=3 ;;
    COMPILE) d=1 ;; AUTOCAST) d=1 ;; AUTOCAST_STEPS) d=$STEPS ;; AUTOCAST_WARMUP) d=$WARMUP ;;
    NICE) d= ;;
  esac
  [ "${!v}" != "$d" ] && cmd="$v=\"${!v}\" $cmd"
done
"$PYTHON" "$ROOT/bench/report.py" "$RESULTS" --out "$OUT" --command "$cmd" --store "$STORE" \
  --configs $CONFIGS
