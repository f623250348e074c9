#!/usr/bin/env bash
# Reproduces every number and figure in docs/findings.md (about 2 hours on 2 cores; finding 8,
# scripts/findings_scaling.sh, and finding 9, scripts/findings_precision.sh and
# scripts/findings_b_spike.sh, are most of it).
# Usage: scripts/findings.sh [OUT_DIR]   (default runs/findings); needs build/normlab.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/findings}
NL=${NORMLAB:-build/normlab}
mkdir -p "$OUT"
# The small model every experiment shares (widths, data, schedule), overridden per experiment.
SMALL=(--set model.d_model=64 --set model.n_head=4 --set model.d_ff=256 --set model.seq_len=64
       --set train.batch_size=8 --set train.eval_batches=4 --set train.log_interval=10
       --set model.mlp=gelu --set model.pos=rope)

# 1. Gradient flow at initialisation (Xiong et al. 2020): post, pre, peri, reordered, deepnorm at
#    L = 6, 12, 24, 48 under GPT-2's init (normal 0.02, residual projections / sqrt(2L)) and Xavier
#    (original Transformer, embeddings scaled by sqrt(d_model) as there).
$NL gradflow "${SMALL[@]}" --placements post,pre,peri,reordered,deepnorm --layers 6,12,24,48 \
  --init gpt2 --batches 8 --out "$OUT/gradflow_gpt2"
$NL gradflow "${SMALL[@]}" --set model.embed_scale=8 --placements post,pre,peri,reordered,deepnorm \
  --layers 6,12,24,48 --init xavier --batches 8 --out "$OUT/gradflow_xavier"

# 2. Depth without warmup at one learning rate.
$NL sweep "${SMALL[@]}" --set train.steps=300 --set optim.warmup_steps=0 --set optim.lr=2e-3 \
  --set train.eval_interval=300 --set diag.interval=50 \
  --grid model.placement=post,pre,peri,deepnorm --grid model.n_layer=6,12,24,48 --out "$OUT/depth"

# 3. Learning-rate sweep with and without warmup (4 layers).
$NL sweep "${SMALL[@]}" --set model.n_layer=4 --set train.steps=300 --set train.eval_interval=300 \
  --grid model.placement=post,pre,peri --grid optim.warmup_steps=0,50 \
  --grid optim.lr=3e-4:3e-1:7log --out "$OUT/lr_warmup" -j 2

# 4. Pre-norm with and without QK-Norm: learning-rate sensitivity and attention-logit growth.
$NL sweep "${SMALL[@]}" --set model.n_layer=4 --set model.placement=pre --set train.steps=300 \
  --set train.eval_interval=300 --set optim.warmup_steps=20 --set diag.interval=50 \
  --grid model.qk_norm=none,rmsnorm --grid optim.lr=3e-4:3e-1:7log --out "$OUT/qk_norm" -j 2

# 5. z-loss 0 vs 1e-4 with weight decay off: log Z over training.
$NL sweep "${SMALL[@]}" --set model.n_layer=4 --set train.steps=1500 --set train.eval_interval=1500 \
  --set optim.weight_decay=0 --set optim.lr=3e-3 --set optim.warmup_steps=50 --set diag.interval=50 \
  --grid train.z_loss=0,1e-4 --out "$OUT/z_loss" -j 2

# 6. Soft-caps on vs off (attention 5, final 3 — small enough to bind at this scale) and the
#    Gemma 2 values (50, 30).
$NL sweep "${SMALL[@]}" --set model.n_layer=4 --set train.steps=600 --set train.eval_interval=600 \
  --set optim.lr=3e-3 --set optim.warmup_steps=50 --set diag.interval=50 \
  --grid model.attn_softcap=0,5,50 --grid model.final_softcap=0,3,30 --out "$OUT/softcap" -j 2

# 7. Retrofitting a stability technique to a trained model (train.init_from): a pre-norm model
#    trained 300 steps at a learning rate where it is unstable (0.1), then continued 300 steps at
#    that rate from its weights (fresh AdamW state, 20 warmup steps) (a) unchanged, (b) with
#    QK-Norm added (new gains start at 1), (c) with z-loss 1e-4, (d) both; beside them, the same
#    model trained from scratch for the 600 steps without and with QK-Norm.
RETRO=("${SMALL[@]}" --set model.n_layer=4 --set model.placement=pre --set optim.lr=0.1
       --set optim.warmup_steps=20 --set diag.interval=25)
[ -e "$OUT/retrofit_base/checkpoints/latest" ] || \
  $NL train "${RETRO[@]}" --set train.steps=300 --set train.eval_interval=300 --out "$OUT/retrofit_base"
# The continuations run with `train` (not `sweep`): the sweep's early-stop rule compares a run
# with its own step-1 loss, which for a continuation is the trained model's, and would stop a
# continuation that merely does not improve; here every variant runs its 300 steps.
for v in "none 0" "rmsnorm 0" "none 1e-4" "rmsnorm 1e-4"; do
  set -- $v
  d="$OUT/retrofit/qk_$1-z_$2"
  [ -e "$d/checkpoints/latest" ] || $NL train "${RETRO[@]}" --init-from "$OUT/retrofit_base" \
    --set model.qk_norm="$1" --set train.z_loss="$2" --set train.steps=300 \
    --set train.eval_interval=300 --out "$d"
done
$NL sweep "${RETRO[@]}" --set train.steps=600 --set train.eval_interval=600 \
  --grid model.qk_norm=none,rmsnorm --out "$OUT/retrofit_scratch" -j 2

# 8. Instabilities against model size (Wortsman et al. 2023, figure 1): a width ladder 64-384 x 7
#    learning rates x {QK-Norm off/on, z-loss off/on with weight decay 0}; its own script and report
#    (about 30 minutes on 2 idle cores).
NORMLAB="$NL" scripts/findings_scaling.sh "$OUT"

# 9. float32 against bf16 matrix products (train.matmul_precision): the compare model for 2,000
#    steps in both precisions and two seeds, a learning-rate sweep in both, and the spike of the
#    benchmark's config b (needs build/bench/normlab_bench); their own scripts (about 40 + 10
#    minutes on 2 idle cores; on a CPU without AVX512-BF16 the bf16 runs are much slower).
NORMLAB="$NL" scripts/findings_precision.sh "$OUT"
scripts/findings_b_spike.sh "$OUT"

$NL report "$OUT"/depth "$OUT"/lr_warmup "$OUT"/qk_norm "$OUT"/z_loss "$OUT"/softcap \
  "$OUT"/retrofit_base "$OUT"/retrofit/* "$OUT"/retrofit_scratch "$OUT"/gradflow_gpt2 "$OUT"/gradflow_xavier --out "$OUT/report.html" --title "normlab findings"
echo "findings written under $OUT"
