# Finding 8's width-ladder setting, sourced by the scripts of findings 8, 11, 12 and 16
# (findings_scaling.sh, findings_optim.sh, findings_mup.sh) so that they train the same models:
# 4 pre-norm blocks, sequence 64, GELU MLP, RoPE, batches of 8, STEPS steps with WARMUP warmup
# steps and cosine decay to 10%, evaluation on 8 batches at the end, diagnostics every 25 steps.
# Needs STEPS and WARMUP set; defines COMMON (the --set options) and width D (d_model D, heads of
# 32, d_ff = 4 D).
COMMON=(--set model.n_layer=4 --set model.placement=pre --set model.seq_len=64
        --set model.mlp=gelu --set model.pos=rope --set train.batch_size=8
        --set train.steps="$STEPS" --set train.eval_interval="$STEPS" --set train.eval_batches=8
        --set train.log_interval=5 --set diag.interval=25 --set optim.warmup_steps="$WARMUP"
        --set optim.schedule=cosine --set optim.min_lr_ratio=0.1)
width() { echo --set model.d_model=$1 --set model.n_head=$(( $1 / 32 )) --set model.d_ff=$(( 4 * $1 )); }
