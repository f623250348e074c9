#!/usr/bin/env bash
# A/B of normlab's GEMM kernels in one process (bench/ab_gemm.cpp): src/tensor of git revision REV
# ("base") against the working tree ("work"), each shape's two builds called in alternation.
#
#   bench/ab_gemm.sh REV [float|bf16] [REPS] [THREADS] [warm|cold] < shapes   # lines "M N K TA TB"
#   echo "2048 1152 384 0 1" | bench/ab_gemm.sh HEAD~1 bf16
#
# Same compiler flags as the build (-O3 -march=native -fno-math-errno); OUT=/tmp/normlab-ab is where
# the two source trees and the binary go.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REV=${1:?usage: bench/ab_gemm.sh REV [float|bf16] [REPS] [THREADS] [warm|cold] < shapes}
KIND=${2:-float}
REPS=${3:-15}
THREADS=${4:-1}
MODE=${5:-warm}  # cold: B from memory every call (bench/ab_gemm.cpp)
OUT=${OUT:-/tmp/normlab-ab}
CXX=${CXX:-g++}
FLAGS=(-O3 -march=native -fno-math-errno -std=c++20)

# Each side gets its own revision's src/tensor (headers and the GEMM and thread sources, whatever
# files that revision splits them into).
rm -rf "$OUT" && mkdir -p "$OUT/base/tensor" "$OUT/work/tensor"
for f in $(git -C "$ROOT" ls-tree --name-only "$REV" src/tensor/); do
  git -C "$ROOT" show "$REV:$f" >"$OUT/base/tensor/$(basename "$f")"
done
cp "$ROOT"/src/tensor/*.h "$ROOT"/src/tensor/*.cpp "$OUT/work/tensor/"
objs=() pids=()
for v in base work; do
  SRCS=()
  for f in "$OUT/$v"/tensor/gemm*.cpp "$OUT/$v"/tensor/threading.cpp; do
    SRCS+=("$(basename "$f" .cpp)")
  done
  for s in "${SRCS[@]}"; do
    "$CXX" "${FLAGS[@]}" -I"$OUT/$v" -Dnormlab="nl_ab_$v" -c "$OUT/$v/tensor/$s.cpp" \
      -o "$OUT/${v}_$s.o" &
    pids+=($!) objs+=("$OUT/${v}_$s.o")
  done
  "$CXX" "${FLAGS[@]}" -I"$OUT/$v" -Dnormlab="nl_ab_$v" -DAB_NAME="ab_gemm_$v" \
    -c "$ROOT/bench/ab_gemm_wrap.cpp" -o "$OUT/${v}_wrap.o" &
  pids+=($!) objs+=("$OUT/${v}_wrap.o")
done
for p in "${pids[@]}"; do wait "$p"; done  # set -e: a failed compile stops here
"$CXX" "${FLAGS[@]}" "$ROOT/bench/ab_gemm.cpp" "${objs[@]}" -lopenblas -lgomp -lpthread \
  -o "$OUT/ab_gemm"
while read -r M N K TA TB _; do
  [ -z "${M:-}" ] && continue
  case $M in \#*) continue ;; esac
  "$OUT/ab_gemm" "$M" "$N" "$K" "$TA" "$TB" "$KIND" "$REPS" "$THREADS" "$MODE"
done
