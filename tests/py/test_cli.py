"""The `normlab` command line end to end: train, eval, generate, info, and every bad input the
training issue lists (each a clear one-line error, a non-zero exit, and no damage to a run)."""
import hashlib
import os
import pathlib
import shutil
import subprocess

import pytest
from normlab_cli import BUILD, normlab

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_interval=5", "--set", "train.eval_batches=2",
        "--set", "train.checkpoint_interval=5", "--set", "train.log_interval=5",
        "--set", "optim.warmup_steps=2", "--set", "train.threads=1"]


def tree_digest(d):
    h = hashlib.sha256()
    for f in sorted(pathlib.Path(d).rglob("*")):
        if f.is_file():
            h.update(str(f.relative_to(d)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli") / "run"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=10", check=0)
    return d


def test_train_writes_run(run):
    assert (run / "config.toml").exists()
    assert (run / "metrics.jsonl").exists() and (run / "metrics.csv").exists()
    assert (run / "checkpoints" / "latest").read_text().strip() == "step_00000010"
    lines = (run / "metrics.csv").read_text().splitlines()
    assert lines[0].startswith("step,tokens,loss,ce,z_loss,lr,grad_norm,tokens_per_s,val_loss")


def test_safetensors_checkpoint_loads_in_reference(run):
    from safetensors.numpy import load_file
    from safetensors import safe_open
    path = run / "checkpoints" / "step_00000010" / "model.safetensors"
    tensors = load_file(str(path))
    assert tensors["tok_emb.weight"].shape == (256, 32)
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert meta["format"] == "pt"
    assert '"placement"' in meta["normlab_config"]


def test_dump_config_roundtrip(tmp_path):
    p = normlab("train", "--dump-config", "--set", "model.placement=peri", check=0)
    assert 'placement = "peri"' in p.stdout
    f = tmp_path / "c.toml"
    f.write_text(p.stdout)
    p2 = normlab("train", "--dump-config", "--config", f, check=0)
    assert p2.stdout == p.stdout


def test_eval(run):
    p = normlab("eval", "--checkpoint", run, "--batches", "2", check=0)
    assert "perplexity" in p.stdout and "bits/byte" in p.stdout
    p2 = normlab("eval", "--checkpoint", run, "--batches", "2", check=0)
    assert p.stdout == p2.stdout


def test_generate_deterministic(run):
    args = ["generate", "--checkpoint", run, "--prompt", "The ", "--max-new-tokens", "20",
            "--temperature", "0.8", "--top-k", "40", "--seed", "3"]
    a = normlab(*args, check=0).stdout
    b = normlab(*args, check=0).stdout
    assert a == b and a.startswith("The ")


def test_info_shows_plan():
    p = normlab("info", "--set", "model.placement=peri", check=0)
    assert "x = x + N_out(F(N_in(x)))" in p.stdout
    assert "final norm before the LM head: yes" in p.stdout


def test_info_shows_dyt_alphas():
    p = normlab("info", "--set", "model.norm=derf", "--set", "model.qk_norm=dyt", check=0)
    assert "placement pre  norm derf  qk_norm dyt (head, pre_rope)" in p.stdout, p.stdout
    assert "initial alpha (model.dyt_alpha_*): attention sublayer 0.8, MLP sublayer 0.2, final " \
        "0.2, QK 0.5; Derf's shift s starts at 0" in p.stdout, p.stdout
    q = normlab("info", "--set", "model.placement=post", "--set", "model.norm=dyt", check=0)
    assert "initial alpha (model.dyt_alpha_*): attention sublayer 0.8, MLP sublayer 0.2\n" \
        in q.stdout, q.stdout  # post-norm: no final norm
    assert "initial alpha" not in normlab("info", check=0).stdout


def test_info_shows_the_attention_layout():
    # 8 query heads over 2 key/value heads of 24 dims, Gemma 2's alternation with a window of 32.
    p = normlab("info", "--set", "model.n_head=8", "--set", "model.n_kv_head=2", "--set",
                "model.head_dim=24", "--set", "model.layer_pattern=every:2", "--set",
                "model.sliding_window=32", check=0)
    assert "attention: 8 query heads over 2 key/value heads, query width 192, key/value width 48" \
        in p.stdout, p.stdout
    assert "layers: sgsg (s = sliding window of 32 keys, g = global)" in p.stdout
    # K and V of 4 layers x 48 floats per token: 2 * 4 * 48 * 4 bytes = 1.5 KiB; 4x below MHA's.
    assert "KV cache for generation: 1.50 KiB per token, 192.00 KiB at seq_len 128 " \
        "(4x smaller than with 8 key/value heads)" in p.stdout
    q = normlab("info", "--set", "model.layer_pattern=sliding", check=2)
    assert "set model.sliding_window > 0" in q.stderr, q.stderr


def test_resume_continues(run, tmp_path):
    d = tmp_path / "r"
    shutil.copytree(run, d)
    # a resumed run keeps its config, so it is already finished at 10 steps
    p = normlab("train", "--resume", d, check=0)
    assert "is already complete at step 10" in p.stdout, p.stdout


# ---- bad input -------------------------------------------------------------------------------

def one_line_error(p, *needles):
    err = p.stderr.strip()
    assert err.count("\n") == 0 or err.startswith("normlab: invalid configuration"), err
    for n in needles:
        assert n in err, err


def test_unknown_key_suggests(tmp_path):
    p = normlab("train", "--out", tmp_path / "x", "--set", "model.n_layers=2")
    assert p.returncode == 2
    assert "did you mean 'model.n_layer'" in p.stderr


def test_every_config_error_reported_at_once(tmp_path):
    p = normlab("train", "--out", tmp_path / "x", "--set", "model.d_model=130",
                "--set", "model.placement=sideways", "--set", "model.attn_softcap=-1")
    assert p.returncode == 2
    for needle in ["model.d_model", "model.placement", "model.attn_softcap"]:
        assert needle in p.stderr, p.stderr
    assert not (tmp_path / "x").exists()


def test_missing_corpus(tmp_path):
    p = normlab("train", "--out", tmp_path / "x", *TINY, "--set", f"data.path={tmp_path}/nope.txt")
    assert p.returncode == 3
    one_line_error(p, "nope.txt")


def test_empty_corpus(tmp_path):
    f = tmp_path / "empty.txt"
    f.write_text("")
    p = normlab("train", "--out", tmp_path / "x", *TINY, "--set", f"data.path={f}")
    assert p.returncode == 3
    one_line_error(p, "empty")


def test_binary_garbage_corpus(tmp_path):
    f = tmp_path / "garbage.bin"
    f.write_bytes(bytes(range(256)) * 100)
    p = normlab("train", "--out", tmp_path / "x", *TINY, "--set", f"data.path={f}")
    assert p.returncode == 3
    one_line_error(p, "garbage.bin")


def test_resume_without_checkpoint_leaves_dir_alone(tmp_path):
    d = tmp_path / "half"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    before = tree_digest(d)
    p = normlab("train", "--resume", d)
    assert p.returncode == 3
    one_line_error(p, "no complete checkpoint")
    assert tree_digest(d) == before


def test_train_into_existing_run_refused(run):
    before = tree_digest(run)
    p = normlab("train", "--out", run, *TINY, "--set", "train.steps=3")
    assert p.returncode == 3
    one_line_error(p, "already holds a checkpoint", "--resume")
    assert tree_digest(run) == before


def test_checkpoint_from_other_config(run, tmp_path):
    other = tmp_path / "other"
    normlab("train", "--out", other, *TINY, "--set", "model.d_model=48", "--set", "train.steps=1",
            check=0)
    # Put the 48-wide weights where the 32-wide config expects its own.
    d = tmp_path / "mixed"
    shutil.copytree(run, d)
    ck = d / "checkpoints" / "step_00000010"
    meta_cfg = ck / "model.safetensors"
    src = next((other / "checkpoints").glob("step_*")) / "model.safetensors"
    # keep the 32-wide config in the metadata: rewrite the file with the other weights
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open
    with safe_open(str(meta_cfg), framework="numpy") as f:
        meta = f.metadata()
    save_file(load_file(str(src)), str(meta_cfg), metadata=meta)
    p = normlab("eval", "--checkpoint", d)
    assert p.returncode == 3
    assert "tok_emb.weight" in p.stderr and "[256, 48]" in p.stderr, p.stderr


def test_truncated_weights(run, tmp_path):
    d = tmp_path / "trunc"
    shutil.copytree(run, d)
    w = d / "checkpoints" / "step_00000010" / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes(data[: len(data) // 2])
    p = normlab("eval", "--checkpoint", d)
    assert p.returncode == 3
    # Named as a damaged checkpoint, then what the run has instead
    # (tests/py/test_checkpoint_recovery.py).
    assert p.stderr.strip().splitlines() == [
        f"normlab: checkpoint {w.parent} is damaged: model.safetensors is truncated (expected "
        f"{len(data)} bytes, found {len(data) // 2})",
        f"intact checkpoints of the run {d} (newest first): step_00000005",
        f"use the newest intact one: normlab eval --checkpoint {w.parent.parent / 'step_00000005'}"
    ], p.stderr


def test_prompt_longer_than_context(run):
    p = normlab("generate", "--checkpoint", run, "--prompt", "x" * 40)
    assert p.returncode == 3
    one_line_error(p, "prompt has 40 tokens", "model.seq_len")


def test_tokenize_and_train_on_token_file(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    tok = tmp_path / "t.bin"
    normlab("tokenize", "--input", text, "--out", tok, check=0)
    data = tok.read_bytes()
    record = int.from_bytes(data[28:32], "little")  # the tokenizer record (version 2), then bytes
    assert data[:8] == b"NLTOKENS" and len(data) == 32 + record + len(text.read_bytes())
    normlab("train", "--out", tmp_path / "r", *TINY, "--set", "train.steps=3",
            "--set", f"data.path={tok}", check=0)


def cpu_flags():
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def test_start_line_names_the_bf16_kernel(tmp_path):
    """train's start line says which matmul precision the run uses and, for bf16, which kernel:
    amx or avx512bf16 only where /proc/cpuinfo lists the feature, the rounded-copies fallback
    where the CPU has no AVX512-BF16; nothing for the float32 default."""
    fallback = "float32 kernel on bf16-rounded copies"
    p = normlab("train", "--out", tmp_path / "bf16", *TINY, "--set", "train.steps=2",
                "--set", "train.matmul_precision=\"bf16\"", check=0)
    start = next(line for line in p.stdout.splitlines() if line.startswith("run "))
    assert " | matmul bf16 on " in start, start
    kernel = start.split(" | matmul bf16 on ", 1)[1].split(" (auto")[0]
    assert kernel in ("amx", "avx512bf16", fallback), start
    flags = cpu_flags()
    if flags is not None:
        if "avx512_bf16" not in flags:
            assert kernel == fallback, start
        if "amx_bf16" not in flags:
            assert kernel != "amx", start
    p = normlab("train", "--out", tmp_path / "fp32", *TINY, "--set", "train.steps=2", check=0)
    start = next(line for line in p.stdout.splitlines() if line.startswith("run "))
    assert "matmul" not in start, start
