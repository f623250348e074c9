#!/usr/bin/env bash
# Finding 9 (docs/findings.md): does bf16 change what a stability study measures?
# The README's compare model (configs/compare.toml: 6 layers, d_model 128, sequence 128, batch 8,
# lr 3e-3, 30 warmup steps, cosine; byte-level embedded corpus) trained twice on the same seeds,
# once with train.matmul_precision = float32 and once with bf16 (bf16 inputs, fp32 accumulation in
# every linear layer and the LM head; everything else float32):
#   full/  Post-, Pre- and Peri-Norm, FULL_STEPS (2000) steps each, diagnostics every 50 steps,
#          in float32, bf16, and float32 with another seed (the yardstick for a difference),
#          evaluation every 250: loss curves, final validation loss, max attention logit, log Z,
#          residual RMS, gradient norms by layer side by side (scripts/precision_table.py).
#   lr/    a learning-rate sweep, 7 rates from 3e-4 to 3e-1 (half-decades) x the three placements x
#          both precisions, LR_STEPS (300) steps: does divergence or sensitivity change?
# Needs a CPU with AVX512-BF16 (without it the bf16 runs take normlab's portable fallback: the
# same numbers, much slower). About 25 minutes on 2 idle Zen 4 cores.
# Usage: scripts/findings_precision.sh [OUT_DIR] (default runs/findings); needs build/normlab.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
FULL_STEPS=${FULL_STEPS:-2000}
LR_STEPS=${LR_STEPS:-300}
JOBS=${JOBS:-2}
mkdir -p "$OUT/precision"
P="$OUT/precision"

# float32_seed7: float32 with another train.seed (initialisation and batches), the seed-to-seed
# spread that the precision's effect is measured against.
for v in "float32 1337" "bf16 1337" "float32_seed7 7"; do
  set -- $v
  prec=${1%_seed*}
  [ -e "$P/full/$1/summary.json" ] || \
    $NL compare --config configs/compare.toml --placements post,pre,peri \
      --set train.steps="$FULL_STEPS" --set train.eval_interval=250 \
      --set train.checkpoint_interval="$FULL_STEPS" --set train.matmul_precision="$prec" \
      --set train.seed="$2" --out "$P/full/$1"
done

$NL sweep --config configs/compare.toml --set train.steps="$LR_STEPS" \
  --set train.eval_interval="$LR_STEPS" --set train.checkpoint_interval="$LR_STEPS" \
  --set diag.interval=50 --grid model.placement=post,pre,peri \
  --grid train.matmul_precision=float32,bf16 --grid optim.lr=3e-4:3e-1:7log \
  --out "$P/lr" -j "$JOBS"

python3 scripts/precision_table.py "$P/full/float32" "$P/full/bf16" --seed "$P/full/float32_seed7" \
  --sweep "$P/lr" \
  | tee "$P/tables.md"
$NL report "$P/full/float32"/* "$P/full/bf16"/* "$P/lr" --out "$P/report.html" \
  --title "normlab finding 9: float32 vs bf16"
echo "finding 9 written under $P"
