#!/usr/bin/env bash
# Finding 13b (docs/findings.md, #37): deep Post-Norm without warmup. Finding 2's setting (the
# shared small model of scripts/findings.sh: GELU MLP, RoPE, LayerNorm, AdamW, cosine schedule,
# batches of 8 x 64 bytes of the embedded corpus, no warmup) at a tiny width (d_model D, heads of
# 16, d_ff 4 D) over the depth ladder L = 6, 12, 24 and a few learning rates, for the ways of
# training Post-Norm deep that the literature proposes:
#   post        plain Post-Norm, x' = N(x + F(x))                       (the baseline)
#   deepnorm    DeepNorm (Wang et al. 2022): x' = N(alpha x + F(x)), beta-scaled init
#   admin       Admin (Liu et al. 2020): x' = N(omega x + F(x)), omega profiled at init
#   admin_logn  the same with admin-torch's closed-form omega (model.admin_omega = logn)
#   rezero      Post-Norm + ReZero (Bachlechner et al. 2020): x' = N(x + a F(x)), a = 0 at init
#   layerscale  Post-Norm + LayerScale (Touvron et al. 2021): x' = N(x + diag(l) F(x)), l = 0.1
#   hybrid      HybridNorm (Zhuo et al. 2025): QKV-norm attention, the norm after it feeds the MLP
#   pre         Pre-Norm, for reference
# Every run: STEPS steps, one thread, evaluation on 4 batches at the end.
# Usage: scripts/findings_deep_post.sh [OUT_DIR] (default runs/findings); needs build/normlab (or
# NORMLAB=path). STEPS (default 250), D (default 32), LRS (default 1e-3,3e-3), JOBS (default 1),
# LONG and LONG_STEPS (below) may be set. About 21 minutes on one busy core. scripts/findings_deep_post_tables.py OUT_DIR [--svg docs/findings] prints the table.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
STEPS=${STEPS:-250}
D=${D:-32}
LRS=${LRS:-1e-3,3e-3}
JOBS=${JOBS:-1}
COMMON=(--set model.d_model="$D" --set model.n_head=$(( D / 16 )) --set model.d_ff=$(( 4 * D ))
        --set model.seq_len=64 --set model.mlp=gelu --set model.pos=rope --set model.norm=layernorm
        --set train.batch_size=8 --set train.threads=1 --set train.steps="$STEPS"
        --set train.eval_interval="$STEPS" --set train.eval_batches=4 --set train.log_interval=10
        --set diag.interval=50 --set optim.warmup_steps=0 --set optim.schedule=cosine)
declare -A VARIANT=(
  [post]="--set model.placement=post"
  [deepnorm]="--set model.placement=deepnorm"
  [admin]="--set model.placement=post --set model.init=admin"
  [admin_logn]="--set model.placement=post --set model.init=admin --set model.admin_omega=logn"
  [rezero]="--set model.placement=post --set model.residual_scale=rezero"
  [layerscale]="--set model.placement=post --set model.residual_scale=layerscale"
  [hybrid]="--set model.placement=hybrid"
  [pre]="--set model.placement=pre"
)
mkdir -p "$OUT/deep_post"
for v in post deepnorm admin admin_logn rezero layerscale hybrid pre; do
  # shellcheck disable=SC2086
  $NL sweep "${COMMON[@]}" ${VARIANT[$v]} --grid model.n_layer=6,12,24 --grid optim.lr="$LRS" \
    --out "$OUT/deep_post/$v" -j "$JOBS"
done
# Longer: does any Post-Norm variant leave the plateau later? L = 6 and 12, LONG_STEPS steps
# (default 600), the same learning rates (LONG=0 skips it).
if [ "${LONG:-1}" = 1 ]; then
  LONG_STEPS=${LONG_STEPS:-600}
  for v in post deepnorm admin admin_logn rezero layerscale hybrid pre; do
    # shellcheck disable=SC2086
    $NL sweep "${COMMON[@]}" ${VARIANT[$v]} --set train.steps="$LONG_STEPS" \
      --set train.eval_interval="$LONG_STEPS" --grid model.n_layer=6,12 --grid optim.lr="$LRS" \
      --out "$OUT/deep_post/long_$v" -j "$JOBS"
  done
fi
echo "finding 13b written under $OUT/deep_post"
