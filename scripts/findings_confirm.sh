#!/usr/bin/env bash
# Finding 17 (docs/findings.md, #49): which of doctor's remedies confirm against a control?
# The runs of findings 5 and 8 (finding 4's and 13's are described in the finding and in
# docs/doctor.md, "Confirming a remedy"), each trained again as its finding trained it, with one
# thread and checkpoints (doctor --confirm replays from the newest intact checkpoint before the
# onset), then `normlab doctor RUN` and `normlab doctor RUN --confirm -j JOBS --seeds SEEDS --json`:
#   f5_z0                 finding 5's z-loss-0 run (scripts/findings.sh: 4 layers, d_model 64,
#                         weight decay 0, lr 3e-3, warmup 50, 1,500 steps, diagnostics every 50),
#                         checkpoints every 100 steps; doctor finds it healthy (log Z drifts 1.3
#                         nats, the threshold is 5), so there is nothing to confirm
#   f8_d256_pre_lr0.046   finding 8's ladder (scripts/findings_ladder.sh), d_model 256, pre-norm
#                         without QK-Norm, weight decay 0.1, lr 0.0464 (attention logits 18,300)
#   f8_d256_wd0_z0_lr0.22 the same, weight decay 0, z-loss 0, lr 0.215 (its output-logit arm)
#   f8_d384_wd0_z0_lr0.22 the same at d_model 384: the width where doctor names output-logit
#                         divergence (the run diverges at step 53), so where z-loss is tested
# The ladder's runs log diagnostics every 10 steps (the finding: 25) and checkpoint every 10.
# Each confirm writes RUN/confirm/fromS_toE/ and OUT/confirm/NAME.json; a rerun skips finished
# arms. About 50 minutes on 2 cores shared with other jobs (2026-12-06: trainings 8 minutes,
# confirms 14.5, 9.7 and 15 minutes; finding 5 trains no arm).
# Usage: scripts/findings_confirm.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). SEEDS (default 3) and JOBS (default 2) may be set.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
SEEDS=${SEEDS:-3}
JOBS=${JOBS:-2}
mkdir -p "$OUT/confirm"
train() {  # train NAME OPTIONS...: once (a finished run is kept)
  local d="$OUT/confirm/$1"; shift
  [ -e "$d/checkpoints/latest" ] || $NL train "$@" --set train.threads=1 --out "$d" || true
}
# Finding 5: the shared small setting of scripts/findings.sh, z-loss 0.
SMALL=(--set model.d_model=64 --set model.n_head=4 --set model.d_ff=256 --set model.seq_len=64
       --set train.batch_size=8 --set train.eval_batches=4 --set train.log_interval=10
       --set model.mlp=gelu --set model.pos=rope)
train f5_z0 "${SMALL[@]}" --set model.n_layer=4 --set train.steps=1500 \
  --set train.eval_interval=1500 --set optim.weight_decay=0 --set optim.lr=3e-3 \
  --set optim.warmup_steps=50 --set diag.interval=50 --set train.z_loss=0 \
  --set train.checkpoint_interval=100 --set train.keep_checkpoints=16
# Finding 8: the width ladder, 150 steps, 15 warmup (a diverged run exits non-zero: kept).
STEPS=150; WARMUP=15
source scripts/findings_ladder.sh
LADDER=("${COMMON[@]}" --set diag.interval=10 --set train.checkpoint_interval=10
        --set train.keep_checkpoints=15)
train f8_d256_pre_lr0.046 "${LADDER[@]}" $(width 256) --set model.qk_norm=none --set optim.lr=0.0464159
train f8_d256_wd0_z0_lr0.22 "${LADDER[@]}" $(width 256) --set optim.weight_decay=0 \
  --set train.z_loss=0 --set optim.lr=0.215443
train f8_d384_wd0_z0_lr0.22 "${LADDER[@]}" $(width 384) --set optim.weight_decay=0 \
  --set train.z_loss=0 --set optim.lr=0.215443
for r in f5_z0 f8_d256_pre_lr0.046 f8_d256_wd0_z0_lr0.22 f8_d384_wd0_z0_lr0.22; do
  $NL doctor "$OUT/confirm/$r"
  $NL doctor "$OUT/confirm/$r" --confirm --dry-run --seeds "$SEEDS"
  $NL doctor "$OUT/confirm/$r" --confirm -j "$JOBS" --seeds "$SEEDS" --json > "$OUT/confirm/$r.json"
done
echo "finding 17's confirmations written under $OUT/confirm"
