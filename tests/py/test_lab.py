"""The stability lab from the command line, on tiny settings: diagnostics in metrics.jsonl,
gradflow, and a resumable parallel sweep with a diverging run."""
import json
import os
import pathlib
import subprocess

import pytest
from normlab_cli import BUILD, normlab as run_normlab

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_batches=1", "--set", "train.log_interval=5", "--set", "train.threads=1"]


def normlab(*args):
    return run_normlab(*args, check=0)


def test_diagnostics_written(tmp_path):
    d = tmp_path / "run"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=10", "--set", "diag.interval=5",
            "--set", "diag.per_head=true", "--set", "model.attn_softcap=2.0",
            "--set", "model.final_softcap=3.0", "--set", "train.z_loss=1e-4")
    recs = [json.loads(l) for l in (d / "metrics.jsonl").read_text().splitlines()]
    diag = [r for r in recs if "resid_rms" in r]
    assert [r["step"] for r in diag] == [1, 5, 10]
    r = diag[-1]
    assert len(r["grad_norm_block"]) == 2 and len(r["grad_norm_attn"]) == 2
    assert len(r["resid_rms"]) == 5 and len(r["resid_max"]) == 5
    assert len(r["attn_max_logit"]) == 2 and len(r["attn_max_logit_head"][0]) == 2
    assert all(0 < e <= 3.5 for e in r["attn_entropy"])  # <= log(32)
    assert r["max_logit"] <= 3.0 + 1e-6 and r["max_logit_raw"] >= r["max_logit"]
    assert set(r["grad_norm_group"]) >= {"attention", "mlp", "embedding", "norm"}
    assert all(v > 0 for v in r["update_ratio"].values())
    assert r["spike"] is False and r["nonfinite"] is False
    assert "log_z_mean" in r and "log_z_std" in r and "log_z_max" in r


def test_gradflow(tmp_path):
    out = tmp_path / "gf"
    normlab("gradflow", *TINY, "--placements", "post,pre,peri,reordered,deepnorm", "--layers", "2,3",
            "--init", "gpt2,xavier", "--batches", "2", "--out", out)
    j = json.loads((out / "gradflow.json").read_text())
    assert len(j["results"]) == 5 * 2 * 2
    for r in j["results"]:
        assert len(r["grad_norm_layer"]) == r["n_layer"] and len(r["hidden_rms"]) == r["n_layer"] + 1
        assert all(x > 0 for x in r["grad_norm_layer"])
    # Post-norm's hidden state is normalised after every block: RMS 1 (up to the gain of 1).
    post = [r for r in j["results"] if r["placement"] == "post"]
    assert all(abs(r["hidden_rms"][-1] - 1.0) < 1e-3 for r in post)


def test_sweep_parallel_resumable_and_divergence(tmp_path):
    out = tmp_path / "sw"
    args = ["sweep", *TINY, "--set", "train.steps=15", "--set", "train.eval_interval=15",
            "--set", "optim.warmup_steps=0", "--set", "diag.interval=5",
            "--grid", "model.placement=post,pre", "--grid", "optim.lr=1e-3,300", "--out", out, "-j", "2"]
    p = normlab(*args)
    assert "LR sensitivity" in p.stdout
    j = json.loads((out / "sweep.json").read_text())
    assert len(j["runs"]) == 4
    status = {r["name"]: r["status"] for r in j["runs"]}
    assert status["placement-post_lr-1e-3"] == "done"
    assert status["placement-pre_lr-300"] == "diverged"
    assert all(r["max_attn_logit"] is not None for r in j["runs"] if r["status"] == "done")
    assert len(j["sensitivity"]) == 2 and all(s["sensitivity"] is not None for s in j["sensitivity"])
    # A second call redoes nothing.
    p2 = normlab(*args)
    assert p2.stdout.count("already finished (") == 4
