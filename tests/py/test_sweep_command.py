"""`normlab sweep --command`: an external PyTorch trainer that writes through normlab.torch.Probe,
run over a learning-rate grid with -j 2: the same sensitivity table and doctor verdicts as for
normlab's runs, a diverged point judged by the divergence rule, resumable (a rerun skips finished
points and retries failed ones), and a placeholder that is not a grid key refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from normlab_cli import BUILD, normlab

HERE = Path(__file__).resolve().parent

TRAINER = '''
import argparse, sys, torch
sys.path.insert(0, {here!r})
import normlab.torch
from probe_fixtures import GPT, markov_batches
ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float)
ap.add_argument("--out")
a = ap.parse_args()
if a.lr == 0.5:
    sys.exit("refusing lr 0.5")
torch.manual_seed(0)
model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
idx, tgt = markov_batches(60)
with normlab.torch.Probe(model, opt, out=a.out, interval=20, config={{"train.steps": 60}}) as p:
    for s in range(60):
        loss = model(idx[s], tgt[s])[1]
        loss.backward()
        opt.step()
        opt.zero_grad()
        p.step(loss)
'''


@pytest.fixture()
def trainer(tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(TRAINER.format(here=str(HERE)))
    monkeypatch.setenv("PYTHONPATH", str(Path(BUILD) / "python"))
    return f"{sys.executable} {script} --lr {{optim.lr}} --out {{out}}"


def test_sweep_runs_an_external_trainer(tmp_path, trainer):
    out = tmp_path / "sweep"
    args = ("sweep", "--command", trainer, "--grid", "optim.lr=0.003,0.5,30", "-j", "2",
            "--set", "train.steps=60", "--out", out)
    p = normlab(*args, check=0, timeout=600)
    runs = {r["name"]: r for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert runs["lr-0.003"]["status"] == "done", runs
    assert runs["lr-30"]["status"] == "diverged", runs
    assert runs["lr-0.5"]["status"] == "failed"
    assert "exited with status 1" in runs["lr-0.5"]["message"]
    assert "refusing lr 0.5" in (out / "lr-0.5" / "command.log").read_text()
    # the sensitivity table and doctor's verdicts, as for normlab's own runs
    assert "| all |" in p.stdout and "LR sensitivity" in p.stdout, p.stdout
    assert "lr-30: 1 problem: diverged" in p.stdout or "lr-30: " in p.stdout
    verdicts = [x for x in p.stdout.splitlines() if x.startswith("  lr-")]
    assert len(verdicts) == 3 and "diverged" in next(v for v in verdicts if "lr-30" in v), verdicts
    sens = json.loads((out / "sweep.json").read_text())["sensitivity"][0]
    assert sens["best_lr"] == pytest.approx(0.003) and sens["diverged"] == 2
    # a rerun skips the finished points and runs the failed one again
    log = (out / "lr-0.003" / "metrics.jsonl").stat().st_mtime_ns
    p = normlab(*args, check=0, timeout=600)
    assert "[lr-0.003] already finished (done), skipped" in p.stdout
    assert "[lr-30] already finished (diverged), skipped" in p.stdout
    assert "[lr-0.5] running the command" in p.stdout
    assert (out / "lr-0.003" / "metrics.jsonl").stat().st_mtime_ns == log


def test_unknown_placeholder_is_refused(tmp_path, trainer):
    p = normlab("sweep", "--command", trainer.replace("{optim.lr}", "{lr}"), "--grid",
                "optim.lr=0.1", "--out", tmp_path / "s")
    assert p.returncode != 0
    assert "{lr} is neither a grid key nor {out} or {seed}" in p.stderr + p.stdout
    assert not (tmp_path / "s" / "lr-0.1" / "metrics.jsonl").exists()
