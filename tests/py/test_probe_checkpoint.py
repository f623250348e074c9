"""Checkpoints of a probed run (docs/python.md, "Checkpoints of a probed run"): a run saved at
step 10 and resumed by a new model, optimizer and probe writes the records of the straight run
bitwise (times apart), its history included; a damaged checkpoint is refused by name, by Python's
load_checkpoint and by doctor's choice of a replay start."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab.torch as ntorch
from normlab_cli import normlab
from probe_fixtures import GPT, markov_batches

SKIP = ("time_s", "tokens_per_s", "wall_s")
STEPS = 20


def records(out: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(x).items() if k not in SKIP}
            for x in (out / "metrics.jsonl").read_text().splitlines()]


def train(out: Path, stop: int = STEPS, resume_from: Path | None = None, save_every: int = 0,
          lr: float = 0.02) -> None:
    """The GPT fixture with AdamW at a constant rate, probed at interval 3 (step 1, 3, 6, ...),
    from step 0 or from a probe checkpoint, to step `stop`."""
    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    start = 0
    if resume_from is not None:
        st = ntorch.load_checkpoint(resume_from)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
    idx, tgt = markov_batches(STEPS, seed=3)
    cfg = {"train.steps": STEPS}
    with ntorch.Probe(model, opt, out=out, interval=3, config=cfg, resume_from=resume_from) as p:
        for s in range(start, stop):
            _, loss = model(idx[s], tgt[s])
            loss.backward()
            opt.step()
            opt.zero_grad()
            p.step(loss)
            if save_every and (s + 1) % save_every == 0:
                p.save_checkpoint({"model": model.state_dict(), "opt": opt.state_dict(),
                                   "step": s + 1})


def test_a_resumed_run_writes_the_straight_runs_records(tmp_path):
    train(tmp_path / "straight")
    train(tmp_path / "first", stop=12, save_every=5)  # interrupted at 12, saved at 5 and 10
    ck = tmp_path / "first" / "checkpoints" / "step_00000010"
    m = json.loads((ck / "probe_checkpoint.json").read_text())
    assert m["step"] == 10 and (ck / "state.pt").stat().st_size == m["files"]["state.pt"]["bytes"]
    assert (ck.parent / "latest").read_text().strip() == "step_00000010"
    train(tmp_path / "resumed", resume_from=ck)
    straight, resumed = records(tmp_path / "straight"), records(tmp_path / "resumed")
    assert [r.get("step") for r in resumed] == [r.get("step") for r in straight]
    # every field, the probed steps' diagnostics, the spike flags, the token count and the end
    # event's train loss included
    assert resumed == straight
    assert any("resid_rms" in r for r in resumed if r.get("step", 0) > 10)
    # resumed in place (out = the checkpoint's run): its records after step 10 are replaced
    train(tmp_path / "first", resume_from=ck)
    assert records(tmp_path / "first") == straight


def test_a_damaged_checkpoint_is_refused_by_name(tmp_path):
    train(tmp_path / "run", stop=10, save_every=5)
    ck = tmp_path / "run" / "checkpoints" / "step_00000010"
    data = (ck / "state.pt").read_bytes()
    (ck / "state.pt").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # same size, one bit off
    with pytest.raises(ValueError, match="state.pt's SHA-256 differs"):
        ntorch.load_checkpoint(ck)
    (ck / "state.pt").write_bytes(data[:100])
    with pytest.raises(ValueError, match=r"state.pt has 100 bytes, the manifest says"):
        ntorch.load_checkpoint(ck)
    with pytest.raises(ValueError, match="state.pt has 100 bytes"):
        ntorch.Probe(GPT(), None, out=tmp_path / "x", resume_from=ck)
    assert not (tmp_path / "x").exists()  # refused before anything is written
    with pytest.raises(ValueError, match="has no probe_checkpoint.json"):
        ntorch.load_checkpoint(tmp_path / "run")


def test_doctor_starts_at_the_newest_intact_probe_checkpoint(tmp_path):
    """A run whose residual stream grows at lr 0.05 (onset at step 15 or later), checkpoints every
    5 steps: with {resume_from} in the command the residual problem's replay starts at the newest
    checkpoint a margin before the onset; with that checkpoint damaged (truncated), at the one
    before it."""
    run = tmp_path / "run"
    train(run, save_every=5, lr=0.05)
    cmd = "python3 train.py --lr {optim.lr} --resume-from {resume_from} --out {out}"

    def plan() -> dict:
        d = json.loads(normlab("doctor", run, "--dry-run", "--json", "--command", cmd,
                               check=0).stdout)
        return {c["problem"]: c for c in d["confirmation"]}

    starts = {k: c for k, c in plan().items() if c["start_step"] > 0}
    assert starts, plan()
    kind, c = next(iter(starts.items()))
    assert "newest intact checkpoint" in c["start_why"], c
    assert c["start_checkpoint"] == str(run / "checkpoints" / f"step_{c['start_step']:08d}")
    state = Path(c["start_checkpoint"]) / "state.pt"
    state.write_bytes(state.read_bytes()[:100])
    c2 = plan()[kind]
    assert c2["start_step"] == c["start_step"] - 5, c2
