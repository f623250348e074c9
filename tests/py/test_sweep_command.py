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


DDP_TRAINER = '''
import argparse, os, sys, torch
sys.path.insert(0, {here!r})
torch.set_num_threads(1)
import normlab.torch
from probe_fixtures import GPT, markov_batches
ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float)
ap.add_argument("--out")
a = ap.parse_args()
world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
if world > 1:
    torch.distributed.init_process_group("gloo")
torch.manual_seed(0)
model = GPT()
call = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
idx, tgt = markov_batches(12, b=4)     # global batches of 4 sequences
rows = slice(rank * 4 // world, (rank + 1) * 4 // world)
with normlab.torch.Probe(call, opt, out=a.out, interval=4, config={{"train.steps": 12}}) as p:
    for s in range(12):
        loss = call(idx[s, rows], tgt[s, rows])[1]
        loss.backward()
        opt.step()
        opt.zero_grad()
        p.step(loss)
if world > 1:
    torch.distributed.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # gloo's threads can abort the interpreter's teardown (tests/py/probe_dist_worker.py)
'''


def test_sweep_runs_a_torchrun_command(tmp_path, monkeypatch):
    """`sweep --command "torchrun --nproc-per-node 2 ..."`: every point trains under DDP on 2
    processes, process 0's probe writes the point's run (2 processes, ddp, in config.toml), and
    its losses are those of the same global batches trained in one process."""
    script = tmp_path / "ddp.py"
    script.write_text(DDP_TRAINER.format(here=str(HERE)))
    monkeypatch.setenv("PYTHONPATH", str(Path(BUILD) / "python"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    torchrun = Path(sys.executable).parent / "torchrun"
    cmd = (f"{torchrun} --standalone --nproc-per-node 2 {script} --lr {{optim.lr}} "
           f"--out {{out}}")
    out = tmp_path / "sweep"
    normlab("sweep", "--command", cmd, "--grid", "optim.lr=0.003,0.01", "--set",
            "train.steps=12", "--out", out, check=0, timeout=600)
    runs = {r["name"]: r for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert [runs[n]["status"] for n in ("lr-0.003", "lr-0.01")] == ["done", "done"], runs
    cfg = (out / "lr-0.01" / "config.toml").read_text()
    assert "world_size = 2" in cfg and 'sharding = "ddp"' in cfg, cfg
    import subprocess
    subprocess.run([sys.executable, str(script), "--lr", "0.01", "--out", str(tmp_path / "one")],
                   check=True)

    def losses(d: Path) -> list[float]:
        return [json.loads(x)["loss"] for x in (d / "metrics.jsonl").read_text().splitlines()
                if "event" not in json.loads(x)]

    one, two = losses(tmp_path / "one"), losses(out / "lr-0.01")
    assert len(two) == 12 and two == pytest.approx(one, rel=1e-5), (one, two)
