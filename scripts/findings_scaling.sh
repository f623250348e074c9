#!/usr/bin/env bash
# Finding 8 (docs/findings.md): instabilities against model size, after Wortsman et al. 2023
# ("Small-scale proxies for large-scale Transformer training instabilities", figure 1).
# A width ladder (d_model 64, 128, 256, 384; head_dim 32, so 2, 4, 8, 12 heads; d_ff = 4 d_model;
# depth fixed at 4 pre-norm blocks) over a learning-rate grid of 7 rates from 1e-4 to 1
# (steps of 10^(2/3)), in four variants:
#   base       pre-norm, weight decay 0.1, no QK-Norm, no z-loss
#   qk         base + QK-Norm (RMSNorm on each head's queries and keys)
#   wd0        weight decay 0, no z-loss        (the output-logit arm: Wortsman et al. turn weight
#   wd0_z      weight decay 0, z-loss 1e-4       decay off to expose the divergence z-loss prevents)
# Every run: STEPS steps of 8 x 64 tokens from the embedded corpus (bytes), 10% linear warmup,
# cosine decay to 10%, evaluation on 8 batches at the end, diagnostics every 25 steps.
# One sweep per width (the sweep grid is variant x learning rate), then one report whose
# scaling figures draw learning-rate sensitivity and the best learning rate against the
# non-embedding parameter count.
# Usage: scripts/findings_scaling.sh [OUT_DIR] (default runs/findings); needs build/normlab.
# STEPS (default 150) and JOBS (default 2) may be set in the environment. About 30 minutes on 2 idle
# cores (estimated from the idle runs: 31 s per 150-step run at d_model 256 on one core).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-150}
JOBS=${JOBS:-2}
WARMUP=$(( STEPS / 10 ))
mkdir -p "$OUT/scaling"
source scripts/findings_ladder.sh
LRS=optim.lr=1e-4:1:7log
# Largest width first: with -j 2 the long runs start early and the short ones fill in.
for d in 384 256 128 64; do
  H=$(( d / 32 )); FF=$(( 4 * d ))
  W=(--set model.d_model=$d --set model.n_head=$H --set model.d_ff=$FF)
  $NL sweep "${COMMON[@]}" "${W[@]}" --grid model.qk_norm=none,rmsnorm --grid "$LRS" \
    --out "$OUT/scaling/d${d}_qk" -j "$JOBS"
  $NL sweep "${COMMON[@]}" "${W[@]}" --set optim.weight_decay=0 --grid train.z_loss=0,1e-4 \
    --grid "$LRS" --out "$OUT/scaling/d${d}_z" -j "$JOBS"
done
$NL report "$OUT"/scaling/d*_qk "$OUT"/scaling/d*_z --out "$OUT/scaling/report.html" \
  --title "normlab finding 8: instabilities against model size"
# Output-logit divergence at a high learning rate (0.215): log Z over training with and without
# z-loss, weight decay 0, every width.
$NL report "$OUT"/scaling/d*_z/z_loss-*_lr-0.215443 --out "$OUT/scaling/log_z_report.html" \
  --title "normlab finding 8: log Z at lr 0.215, weight decay 0, z-loss 0 vs 1e-4"
echo "finding 8 written under $OUT/scaling"
