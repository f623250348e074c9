"""normlab.torch.TrainerCallback and LightningCallback under DDP: 2 processes (gloo, CPU) started
as torchrun starts them (tests/py/probe_trainers_dist_worker.py), transformers.Trainer (DDP from
accelerate) and Lightning (strategy "ddp"), 6 steps of 2 micro-batches per process, clipping at
1.0. Process 0's run must equal, every field of every step line at float32 tolerance, a single
process training the same weights on the global micro-batches (each the concatenation of what the
two processes saw) with the loop written by hand: the gradient norms are the all-reduced gradients'
(before clipping), the loss is the global batch's, the forward statistics are pooled over both
processes' tokens. Only process 0 writes; config.toml records 2 processes."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab
import normlab.torch as ntorch
from probe_fixtures import V, hf_model
from probe_trainers_dist_worker import ACCUM, CLIP, INTERVAL, LR, STEPS
from test_probe_dist import SKIP, _env, _port, lines_of, rel_errors

HERE = Path(__file__).resolve().parent
REL = 1e-5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    pytest.importorskip("lightning.pytorch")
    out = tmp_path_factory.mktemp("trainers_dist")
    worker = [sys.executable, str(HERE / "probe_trainers_dist_worker.py"), str(out),
              "trainer,lightning"]
    port = str(_port())
    procs = [subprocess.Popen(worker, env=_env(
        RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(2)]
    for p in procs:
        text, _ = p.communicate(timeout=600)
        assert p.returncode == 0, text[-3000:]
    return out


def reference(seen: list[list[torch.Tensor]], out: Path) -> None:
    """One process, the same initial weights and optimizer; micro-batch a of step s is the
    concatenation of the processes' a-th; the gradients read before clipping."""
    model = hf_model("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.1)
    with ntorch.Probe(model, opt, out=out, interval=INTERVAL, per_head=True,
                      grads="caller") as probe:
        for s in range(STEPS):
            losses = []
            for a in range(ACCUM):
                x = torch.cat([mine[s * ACCUM + a] for mine in seen])
                logits = model(input_ids=x).logits
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V),
                                                         x[:, 1:].reshape(-1))
                (loss / ACCUM).backward()
                losses.append(loss.detach())
            probe.read_grads()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            opt.zero_grad()
            probe.step(torch.stack(losses).mean(), grad_norm=norm)


@pytest.mark.parametrize("mode", ["trainer", "lightning"])
def test_ddp_run_equals_one_process_on_the_global_batches(runs, mode, tmp_path):
    saved = [torch.load(runs / f"{mode}.seen{r}.pt") for r in range(2)]
    seen = [d["seen"] for d in saved]
    assert [len(x) for x in seen] == [STEPS * ACCUM] * 2
    # the processes trained on different sequences: local gradients are not the global ones
    assert not any(torch.equal(a, b) for a, b in zip(*seen))
    reference(seen, tmp_path / "ref")
    ref = [{k: v for k, v in x.items() if k not in SKIP} for x in lines_of(tmp_path / "ref")]
    got = [{k: v for k, v in x.items() if k not in SKIP} for x in lines_of(runs / f"{mode}.r0")]
    assert len(got) == len(ref) == STEPS + 1
    assert [x["step"] for x in got if "grad_norm_block" in x] == [1, 2, 4, 6]
    assert [x["tokens"] for x in got[:2]] == [64, 128]  # both processes' tokens
    assert any(x["grad_norm"] > CLIP for x in ref[:-1])  # the clip was active
    err, where = max(rel_errors(x, y, f"step {x.get('step')}") for x, y in zip(ref, got))
    print(f"{mode}: largest relative error {err:.2e} at {where}")
    assert err < REL, (err, where)
    if mode == "trainer":  # and what Trainer logs itself (the global loss and norm)
        logs = [h for h in saved[0]["log"] if "loss" in h]
        assert [h["step"] for h in logs] == list(range(1, STEPS + 1))
        for x, h in zip(got, logs):
            assert x["loss"] == pytest.approx(h["loss"], rel=REL)
            assert x["grad_norm"] == pytest.approx(float(h["grad_norm"]), rel=REL)
    assert not (runs / f"{mode}.r1").exists()  # process 1 writes nothing
    cfg = normlab.Config(runs / f"{mode}.r0")
    assert (cfg["source.world_size"], cfg["source.sharding"]) == (2, "ddp")
    assert cfg["source.trainer"] == {"trainer": "transformers.Trainer",
                                     "lightning": "lightning"}[mode]
    assert (cfg["train.grad_accum"], cfg["optim.grad_clip"]) == (ACCUM, CLIP)
