#!/usr/bin/env bash
# Runs the fuzz targets of a NORMLAB_FUZZ build for a bounded time each, from their seed corpora,
# and fails if any target crashes (or times out, or leaks).
#   tests/fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]
# SECONDS per target (default $NORMLAB_FUZZ_SECONDS, else 45); TARGETs default to all
# (safetensors config text_corpus token_file tokenizer_json). $FUZZ_JOBS targets run at once
# (default 2).
# New inputs go to BUILD_DIR/fuzz/corpus/<target> (the seeds in tests/fuzz/corpus stay as they
# are); a crashing input is saved as BUILD_DIR/fuzz/artifacts/<target>/crash-<sha1>, the log as
# BUILD_DIR/fuzz/<target>.log. Prints the number of executions per target.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: tests/fuzz/run.sh BUILD_DIR [SECONDS] [TARGET...]}" && pwd)"
seconds="${2:-${NORMLAB_FUZZ_SECONDS:-45}}"
shift $(( $# >= 2 ? 2 : 1 ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(safetensors config text_corpus token_file tokenizer_json)
jobs="${FUZZ_JOBS:-2}"

max_len() {
  case "$1" in
    token_file | config) echo 1024 ;;  # configs are ~600 bytes; unknown keys cost O(length)
    tokenizer_json) echo 8192 ;;        # the byte-fallback seeds (256 <0xNN> tokens) are ~4.5 KB
    *) echo 4096 ;;
  esac
}

run_one() {
  local t="$1" out="$build/fuzz"
  local bin="$build/tests/fuzz/fuzz_$t"
  mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
  local dict=()
  [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
  # libFuzzer's own checks: -timeout per input, -rss_limit_mb, leak detection after each input.
  "$bin" "$out/corpus/$t" "$here/corpus/$t" "${dict[@]}" \
    -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=20 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/artifacts/$t/" >"$out/$t.log" 2>&1
}

mkdir -p "$build/fuzz"
declare -A pid_of
for t in "${targets[@]}"; do
  [ -x "$build/tests/fuzz/fuzz_$t" ] || { echo "[fuzz] no target $build/tests/fuzz/fuzz_$t" >&2; exit 2; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$t" &
  pid_of[$t]=$!
done

failed=()
for t in "${targets[@]}"; do
  rc=0
  wait "${pid_of[$t]}" || rc=$?
  log="$build/fuzz/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)
  if [ "$rc" -eq 0 ]; then
    printf '[fuzz] %-12s %10s executions in %s s (%s)\n' "$t" "${execs:-?}" "$seconds" "$cov"
  else
    failed+=("$t")
    printf '[fuzz] %-12s FAILED (exit %s) after %s executions; log %s\n' "$t" "$rc" \
      "${execs:-?}" "$log" >&2
    # The sanitizer's or the property's report, else the end of the log.
    grep -E -A12 '^==[0-9]+==ERROR|fuzz property violated|InternalError on fuzz|runtime error:' \
      "$log" | head -40 >&2 || tail -20 "$log" >&2
    grep -E '^(artifact_prefix|Test unit written)' "$log" >&2 || true
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "[fuzz] crashed: ${failed[*]}; reproduce with: BUILD/tests/fuzz/fuzz_<target> <crash file>" >&2
  exit 1
fi
