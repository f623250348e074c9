"""`normlab doctor RUN --confirm` end to end through the CLI and Python, on tiny real runs:
(1) attention-logit growth at lr 0.2 without QK-Norm: QK-Norm and a third of the rate confirmed against the control
(which, from step 0, replays the run bitwise: (7)); --dry-run plans without training; a rerun
finds the arms finished; (2) loss spikes at a high lr: the lower lr confirmed; the report draws the arms and the verdicts; normlab.doctor(confirm=True,
jobs=2) returns the same structure; (5) a remedy the run already has is not run again; (3) a
healthy run: nothing to confirm; (6) --command on a probed PyTorch script, with and without
{resume_from}: a remedy the template cannot express is "cannot confirm", without a resume
placeholder the verdicts say the arms started at step 0, with it (and probe checkpoints) the arms
resume from the newest checkpoint before the onset.""" 
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from normlab_cli import BUILD, normlab

HERE = Path(__file__).resolve().parent

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_interval=0", "--set", "train.eval_batches=1",
        "--set", "train.log_interval=1", "--set", "train.threads=1"]
# Pre-Norm without QK-Norm at lr 0.2: attention logits over 1,000 within 20 steps (a third of the
# rate keeps them near 100, QK-Norm under 10: measured 1276-2092, 89-138, 6 over 3 data orders).
FAILING = ["--set", "train.steps=30", "--set", "optim.lr=0.2", "--set", "optim.warmup_steps=10",
           "--set", "diag.interval=5", "--set", "train.checkpoint_interval=10"]


def confirmation(d: dict, kind: str) -> dict:
    return next(c for c in d["confirmation"] if c["problem"] == kind)


def verdict(c: dict, key: str) -> dict:
    return next(v for v in c["verdicts"] if key in v["remedy"])


@pytest.fixture(scope="module")
def attn_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("confirm") / "attn"
    normlab("train", "--out", d, *TINY, *FAILING, check=0)
    return d


def test_dry_run_plans_without_training(attn_run):
    p = normlab("doctor", attn_run, "--confirm", "--dry-run", check=0)
    assert "CONFIRM attention_logit_growth" in p.stdout, p.stdout
    assert "start: step 0 (model.qk_norm cannot change on resume" in p.stdout, p.stdout
    assert "control: the run's config unchanged (seed 0 replays the run)" in p.stdout
    assert "[model.qk_norm = rmsnorm]" in p.stdout and "estimated:" in p.stdout
    assert "data orders train.data_seed = 0..2" in p.stdout, p.stdout
    # An external command's arms take the data order as its {seed}.
    p = normlab("doctor", attn_run, "--confirm", "--dry-run", "--command",
                "true {seed} {out} {model.qk_norm}", check=0)
    assert "data orders {seed} = 0..2" in p.stdout, p.stdout
    assert not (attn_run / "confirm").exists()
    d = json.loads(normlab("doctor", attn_run, "--dry-run", "--json", check=0).stdout)
    c = confirmation(d, "attention_logit_growth")
    assert c["dry_run"] and c["seeds"] == 3 and c["start_step"] == 0
    assert c["estimated_steps"] == sum(1 for a in c["arms"] if "cannot" not in a) * 3 * \
        (c["window_end"] - c["start_step"])


def test_qk_norm_confirmed_and_the_control_replays_the_run(attn_run):
    t0 = time.monotonic()
    p = normlab("doctor", attn_run, "--confirm", "-j", "2", "--json", check=0, timeout=600)
    wall = time.monotonic() - t0
    d = json.loads(p.stdout)
    c = confirmation(d, "attention_logit_growth")
    assert c["replay_bitwise"], c["replay_check"]
    v = verdict(c, "QK-Norm")
    assert v["verdict"] == "confirmed", json.dumps(c, indent=1)
    assert v["control_present"] >= 2 and v["treatment_present"] == 0
    lr = verdict(c, "lower the learning rate")
    assert lr["verdict"] == "confirmed" and lr["treatment_present"] == 0, json.dumps(c, indent=1)
    control = next(a for a in c["arm_results"] if a["name"] == "control")
    assert len(control["statistic"]) == 3 and min(x for x in control["statistic"]) > 0
    # the arms are ordinary run directories; the finding carries its confirmation too
    assert c["dir"] == str(attn_run / "confirm" / f"from0_to{c['window_end']}")
    assert "qk_norm-rmsnorm" in [a["name"] for a in c["arms"]]
    assert (Path(c["dir"]) / "control_seed2" / "metrics.jsonl").exists()
    f = next(f for f in d["findings"] if f["kind"] == "attention_logit_growth")
    assert f["confirmation"]["verdicts"] == c["verdicts"]
    print(f"confirm wall {wall:.1f} s")
    # the report draws the statistic of every arm over the window, and the verdict table
    assert json.loads((attn_run / "confirm" / "confirmation.json").read_text())["confirmation"]
    normlab("report", attn_run, "--out", attn_run / "report.html", check=0)
    svg = (attn_run / "report_figures" / "confirm_attn_attention_logit_growth.svg").read_text()
    assert "qk_norm-rmsnorm" in svg and "control" in svg and "threshold" in svg
    html = (attn_run / "report.html").read_text()
    assert "confirming the remedies for attention_logit_growth" in html
    assert "<b>confirmed</b>" in html
    # a rerun trains nothing and gives the same verdicts
    p = normlab("doctor", attn_run, "--confirm", check=0, timeout=600)
    assert "already finished (done), skipped" in p.stdout, p.stdout
    assert "QK-Norm" in p.stdout and ": confirmed" in p.stdout, p.stdout


def test_python_returns_the_same_structure(attn_run):
    from normlab_py import normlab as nl
    # A shorter window (its own arms, trained by worker processes): the same structure.
    d = nl.doctor(attn_run, confirm=True, seeds=2, jobs=2, max_steps=15)
    c = confirmation(d, "attention_logit_growth")
    assert c["window_end"] == 15 and c["dir"].endswith("from0_to15"), c
    assert c["replay_bitwise"], c["replay_check"]
    ran = [a for a in c["arm_results"] if a["status"]]
    assert len(ran) >= 2 and all(len(a["statistic"]) == 2 for a in ran), ran
    assert verdict(c, "QK-Norm")["verdict"] in ("confirmed", "inconclusive"), c
    plan = nl.doctor(attn_run, dry_run=True, seeds=2)
    assert confirmation(plan, "attention_logit_growth")["seeds"] == 2
    with pytest.raises(nl.ConfigError):
        nl.doctor(attn_run, confirm=True, seeds=0)


def test_loss_spikes_at_a_high_lr_lower_lr_confirmed(tmp_path):
    """(2) Loss spikes from a high-lr burst (lr 0.5 right after a 10-step warmup): the control
    reproduces them in most seeds and doctor's lower learning rate (lr / 3) removes them."""
    d = tmp_path / "spiky"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=40", "--set", "optim.lr=0.5",
            "--set", "optim.warmup_steps=10", "--set", "diag.interval=5",
            "--set", "train.checkpoint_interval=5", "--set", "train.keep_checkpoints=20", check=0)
    t0 = time.monotonic()
    j = json.loads(normlab("doctor", d, "--confirm", "-j", "2", "--json", check=0,
                           timeout=600).stdout)
    c = confirmation(j, "loss_spikes")
    v = verdict(c, "lower the learning rate")
    assert v["control_present"] >= 2, json.dumps(c, indent=1)
    assert v["verdict"] == "confirmed" and v["treatment_present"] == 0, json.dumps(c, indent=1)
    assert c["replay_bitwise"], c["replay_check"]
    print(f"spikes confirm wall {time.monotonic() - t0:.1f} s")


def test_a_remedy_the_run_has_is_not_run_again(tmp_path):
    """(5) The same failing run with the attention soft-cap already on: doctor reports it as
    tried (with what the run shows with it) and the confirmation plans no arm for it."""
    d = tmp_path / "capped"
    normlab("train", "--out", d, *TINY, *FAILING, "--set", "model.attn_softcap=50", check=0)
    j = json.loads(normlab("doctor", d, "--confirm", "--dry-run", "--json", check=0).stdout)
    f = next(f for f in j["findings"] if f["kind"] == "attention_logit_growth")
    tried = [r for r in f["remedies"] if r["tried"]]
    assert [r["set"] for r in tried] == [{"model.attn_softcap": "50"}], f["remedies"]
    c = confirmation(j, "attention_logit_growth")
    names = [a["name"] for a in c["arms"]]
    assert "attn_softcap-50" not in names and "qk_norm-rmsnorm" in names, names
    assert any(n.startswith("already tried") and "attn_softcap" in n for n in c["notes"]), c


def test_healthy_run_has_nothing_to_confirm(tmp_path):
    d = tmp_path / "healthy"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=300", "--set", "optim.lr=0.003",
            "--set", "train.batch_size=8", "--set", "diag.interval=10", check=0)
    p = normlab("doctor", d, "--confirm", check=0)
    assert "nothing to confirm: doctor names no problem" in p.stdout, p.stdout
    assert not (d / "confirm").exists()


TRAINER = '''
import argparse, sys, torch
sys.path.insert(0, {here!r})
import normlab.torch
from probe_fixtures import GPT, markov_batches
ap = argparse.ArgumentParser()
ap.add_argument("--lr", type=float)
ap.add_argument("--z-loss", type=float, default=0.0)
ap.add_argument("--steps", type=int, default=40)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--resume-from", default="")
ap.add_argument("--checkpoint-every", type=int, default=0)
ap.add_argument("--out")
a = ap.parse_args()
torch.manual_seed(0)
model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
start = 0
if a.resume_from:  # the model, the optimizer and the step of a probe checkpoint
    st = normlab.torch.load_checkpoint(a.resume_from)
    model.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    start = st["step"]
    for g in opt.param_groups:  # the arm's learning rate, not the checkpoint's
        g["lr"] = a.lr
idx, tgt = markov_batches(40, seed=1)
order = list(range(40))
if a.seed:  # --seed: the order of the batches from the start step on, nothing else
    g = torch.Generator().manual_seed(a.seed)
    order[start:] = [start + int(i) for i in torch.randperm(40 - start, generator=g)]
cfg = {{"train.steps": a.steps}}
with normlab.torch.Probe(model, opt, out=a.out, interval=5, config=cfg,
                         resume_from=a.resume_from or None) as p:
    for s in range(start, a.steps):
        logits, loss = model(idx[order[s]], tgt[order[s]])
        loss = loss + a.z_loss * torch.logsumexp(logits, -1).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        p.step(loss)
        if a.checkpoint_every and (s + 1) % a.checkpoint_every == 0:
            p.save_checkpoint({{"model": model.state_dict(), "opt": opt.state_dict(),
                               "step": s + 1}})
'''


def test_command_on_a_probed_run(tmp_path, monkeypatch):
    """The probed run at lr 0.05 shows output-logit divergence: z-loss, which the command can
    express, is tested against the control (seed 0 = the run itself, bitwise); the final soft-cap
    it cannot express is "cannot confirm"; without {resume_from} the verdicts say the arms started
    at step 0, with it the plan has no such note."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER.format(here=str(HERE)))
    monkeypatch.setenv("PYTHONPATH", str(Path(BUILD) / "python"))
    run = tmp_path / "probed"
    import subprocess
    subprocess.run([sys.executable, str(script), "--lr", "0.05", "--out", str(run)], check=True)
    cmd = (f"{sys.executable} {script} --lr {{optim.lr}} --z-loss {{train.z_loss}} "
           f"--steps {{train.stop_at}} --seed {{seed}} --out {{out}}")
    # Python trains the arms (normlab.doctor(command=)); the CLI then finds them all finished and
    # must judge them exactly as Python did.
    import normlab as nl
    t0 = time.monotonic()
    py = nl.doctor(run, confirm=True, command=cmd, jobs=2, seeds=1)
    wall = time.monotonic() - t0
    logs = {f: f.stat().st_mtime_ns for f in (run / "confirm").glob("*_command/*/command.log")}
    assert logs, "Python's arms wrote no command.log"
    p = normlab("doctor", run, "--confirm", "--command", cmd, "-j", "2", "--seeds", "1", "--json",
                check=0, timeout=600)
    assert {f: f.stat().st_mtime_ns for f in logs} == logs, "the CLI ran an arm again"
    assert json.loads(p.stdout) == py
    c = confirmation(py, "output_logit_divergence")
    assert c["replay_bitwise"], c["replay_check"]
    z = verdict(c, "z-loss")
    assert z["verdict"] in ("confirmed", "not confirmed", "inconclusive",
                            "control did not reproduce"), z
    assert "has no {resume_from} placeholder" in z["reason"], z
    cap = verdict(c, "final soft-cap")
    assert cap["verdict"] == "cannot confirm"
    assert cap["reason"] == "cannot confirm: your command has no placeholder for " \
                            "model.final_softcap", cap
    print(f"command confirm wall {wall:.1f} s: {z['verdict']}")
    # With a resume placeholder, but no checkpoint in the run: still step 0, and the plan does
    # not say the command lacks one.
    d = json.loads(normlab("doctor", run, "--dry-run", "--json", "--command",
                           cmd + " --resume-from {resume_from}", check=0).stdout)
    c = confirmation(d, "output_logit_divergence")
    assert c["start_step"] == 0 and "no intact checkpoint" in c["start_why"], c
    assert not any("{resume_from}" in n for n in c["notes"]), c


def test_command_with_resume_from_starts_at_the_probed_checkpoint(tmp_path, monkeypatch):
    """(6) The same probed script saving probe checkpoints every 5 steps, confirmed with a
    {resume_from} placeholder: the residual-growth replay starts at the newest checkpoint a
    margin before its onset, the arms resume from it (their records: the run's up to the start,
    then their own), the control's seed 0 replays the run bitwise from there, and no verdict
    says the arms started at step 0."""
    script = tmp_path / "train.py"
    script.write_text(TRAINER.format(here=str(HERE)))
    monkeypatch.setenv("PYTHONPATH", str(Path(BUILD) / "python"))
    run = tmp_path / "probed"
    import subprocess
    subprocess.run([sys.executable, str(script), "--lr", "0.05", "--out", str(run),
                    "--checkpoint-every", "5"], check=True)
    cmd = (f"{sys.executable} {script} --lr {{optim.lr}} --z-loss {{train.z_loss}} "
           f"--steps {{train.stop_at}} --seed {{seed}} --out {{out}} "
           f"--resume-from {{resume_from}}")
    t0 = time.monotonic()
    d = json.loads(normlab("doctor", run, "--confirm", "--command", cmd, "-j", "2", "--seeds",
                           "1", "--json", check=0, timeout=600).stdout)
    wall = time.monotonic() - t0
    c = confirmation(d, "residual_growth")
    assert c["start_step"] > 0 and "newest intact checkpoint" in c["start_why"], c
    assert c["start_checkpoint"] == str(run / "checkpoints" / f"step_{c['start_step']:08d}")
    assert c["replay_bitwise"], c["replay_check"]
    lr = verdict(c, "lower the learning rate")
    assert lr["verdict"] != "cannot confirm" and "resume_from" not in lr["reason"], lr
    assert not any("resume_from" in n for n in c["notes"]), c
    arm = [json.loads(x) for x in
           (Path(c["dir"]) / "control" / "metrics.jsonl").read_text().splitlines()]
    orig = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in arm if "event" not in r]
    assert steps == list(range(1, c["window_end"] + 1)), steps
    before = [r for r in orig if "event" not in r and r["step"] <= c["start_step"]]
    assert arm[:len(before)] == before  # the history, copied from the run
    print(f"resumed command confirm wall {wall:.1f} s: start {c['start_step']}, "
          f"lr {lr['verdict']}")
