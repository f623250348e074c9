"""`normlab eval` says what it measured: by default every token of the data once (exact mode, its
loss equal to the per-token cross-entropy computed here from the model's logits over the
non-overlapping windows, the short last window weighted by its tokens), `--batches` a labelled
sample, beyond the budget a sample that says so; and `train`'s banner states the validation
sample. Python's Run.eval() returns the same."""
import math
import re

import numpy as np
import pytest
from normlab_cli import normlab

T = 32
TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", f"model.seq_len={T}", "--set", "train.batch_size=4",
        "--set", "train.eval_interval=5", "--set", "train.eval_batches=2",
        "--set", "train.checkpoint_interval=5", "--set", "train.log_interval=5",
        "--set", "optim.warmup_steps=2", "--set", "train.threads=1", "--set", "train.steps=10"]


def count(text):
    return int(text.replace(",", ""))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval_exact") / "run"
    p = normlab("train", "--out", d, *TINY, check=0)
    return d, p.stdout


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    # 3,204 bytes: 3,203 targets = 100 windows of 32 and a short one of 3.
    f = tmp_path_factory.mktemp("eval_exact_data") / "small.txt"
    text = ("the quick brown fox jumps over the lazy dog. " * 80)[:3204]
    f.write_text(text)
    assert len(f.read_bytes()) == 3204
    return f


def val_tokens(banner):
    return count(re.search(r"\+ ([\d,]+) validation tokens", banner).group(1))


def test_train_banner_states_the_validation_sample(run):
    _, banner = run
    v = val_tokens(banner)
    # 2 batches of 4 windows of 32 = 256 targets, evenly spaced over the split.
    want = (f"validation: 256 of {v:,} tokens (train.eval_batches = 2 batches of 4 x 32), "
            "sampled: 8 evenly spaced windows, 256 distinct tokens")
    assert want in banner, banner
    assert "every 5 steps and at the end" in banner, banner


def test_eval_scores_every_validation_token_once_by_default(run):
    d, banner = run
    v = val_tokens(banner)
    p = normlab("eval", "--checkpoint", d, check=0)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("data embedded:wordnet_glosses  tokenizer bytes"), p.stdout
    want = (f"tokens scored {v - 1:,} (every token of the validation split once: {v:,} tokens, "
            f"the first only as context; {math.ceil((v - 1) / T):,} non-overlapping windows")
    assert lines[1].startswith(want), p.stdout
    assert lines[2].startswith("loss ") and "bits/byte" in lines[2], p.stdout


def test_batches_gives_the_sampled_label(run, small):
    d, _ = run
    p = normlab("eval", "--checkpoint", d, "--data", small, "--batches", "100", check=0)
    line = p.stdout.splitlines()[1]
    # 100 batches of 4 windows of 32 = 12,800 targets over 3,204 tokens: overlapping.
    assert line.startswith(f"tokens 12,800 (sampled: 100 batches of 4 x 32 from the 3,204 tokens "
                           f"of {small}: 400 evenly spaced windows, 3,203 distinct tokens"), line
    assert "each about 4.0 times (the windows overlap)" in line, line
    assert "budget" not in line  # asked for, not chosen for lack of time
    again = normlab("eval", "--checkpoint", d, "--data", small, "--batches", "100", check=0)
    assert again.stdout == p.stdout


def test_exact_and_batches_exclude_each_other(run):
    d, _ = run
    p = normlab("eval", "--checkpoint", d, "--exact", "--batches", "2")
    assert p.returncode == 2 and "--exact" in p.stderr and "--batches" in p.stderr, p.stderr


def test_exact_loss_is_the_per_token_mean_over_the_windows(run, small):
    from normlab_py import normlab as nl
    d, _ = run
    p = normlab("eval", "--checkpoint", d, "--data", small, check=0)
    assert p.stdout.splitlines()[1].startswith(
        f"tokens scored 3,203 (every token of {small} once: 3,204 tokens, the first only as "
        "context; 101 non-overlapping windows of up to 32, exact)"), p.stdout
    ev = nl.Run(d).eval(data=small)
    assert ev["exact"] is True and ev["tokens"] == 3203 and ev["data_tokens"] == 3204
    assert ev["distinct_tokens"] == 3203 and ev["sample"] == p.stdout.splitlines()[1]
    assert f"loss {ev['loss']:.4f} " in p.stdout

    # Directly: each window's logits, -log softmax of its targets in float64, over all targets.
    ids = np.frombuffer(small.read_bytes(), dtype=np.uint8).astype(np.int64)
    m = nl.Run(d).model()
    nats, lengths, means = 0.0, [], []
    for o in range(0, len(ids) - 1, T):
        L = min(T, len(ids) - 1 - o)
        x = m.forward(ids[o:o + L]).astype(np.float64)  # (L, V)
        mx = x.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(x - mx).sum(axis=1))
        ce = lse - x[np.arange(L), ids[o + 1:o + L + 1]]
        nats += ce.sum()
        lengths.append(L)
        means.append(ce.mean())
    assert lengths[-1] == 3 and len(lengths) == 101
    direct = nats / (len(ids) - 1)
    assert math.isclose(ev["loss"], direct, rel_tol=1e-5), (ev["loss"], direct)
    # The mean of the window means (the short window as heavy as a full one) is another number.
    assert not math.isclose(float(np.mean(means)), direct, rel_tol=1e-4)


def test_beyond_the_budget_eval_samples_and_says_so(tmp_path):
    # About 7e6 forward FLOPs per token: the budget of 1.2e12 FLOPs is about 172,000 tokens,
    # fewer than the ~200,000 of the embedded corpus's validation split.
    d = tmp_path / "wide"
    normlab("train", "--out", d, "--set", "model.n_layer=4", "--set", "model.d_model=256",
            "--set", "model.n_head=4", "--set", "model.d_ff=1024", "--set", "train.batch_size=1",
            "--set", "train.steps=1", "--set", "train.eval_interval=0",
            "--set", "train.checkpoint_interval=1", "--set", "optim.warmup_steps=1", check=0)
    p = normlab("eval", "--checkpoint", d, check=0)
    line = p.stdout.splitlines()[1]
    # train.eval_batches = 8 batches of 1 x 128.
    assert line.startswith("tokens 1,024 (sampled: 8 batches of 1 x 128 from the "), line
    m = re.search(r"scoring every token would be ([\d,]+) tokens, over this model's budget of "
                  r"([\d,]+) \(--exact forces it\)", line)
    assert m and count(m.group(1)) > count(m.group(2)) > 100_000, line
