"""`normlab train` as a user drives it: the startup banner, warnings, extending a finished run,
keys refused on resume, resuming from an older checkpoint, --dump-config on resume, the reason of
every skipped step in the status line, and Ctrl-C (the first stops after the step and saves a
checkpoint, the second exits at once, leaving the last complete checkpoint intact)."""
import hashlib
import json
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest
from normlab_cli import BUILD, normlab
from test_cli import TINY, tree_digest


def step_records(run):
    """The step records of metrics.jsonl (event lines left out)."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        j = json.loads(line)
        if "event" not in j:
            out.append(j)
    return out


def latest(run):
    return (run / "checkpoints" / "latest").read_text().strip()


def sha(path):
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def test_banner(tmp_path):
    d = tmp_path / "r"
    p = normlab("train", "--out", d, *TINY, "--set", "train.steps=2", check=0)
    lines = p.stdout.splitlines()
    m = re.fullmatch(r"normlab train: ([\d,]+) parameters \| data: ([\d,]+) train \+ ([\d,]+) "
                     r"validation tokens", lines[0])
    assert m, lines[0]
    params, train, val = (int(g.replace(",", "")) for g in m.groups())
    assert params > 0 and train > val > 0
    n_set = TINY.count("--set") + 1
    assert lines[1] == f"run {d} | config built-in default + {n_set} --set | 1 thread", lines[1]
    assert lines[2].startswith("validation: "), lines[2]  # its sample (test_eval_exact.py)
    assert lines[3].startswith("step      1/2 |"), lines[3]
    assert p.stderr == "", p.stderr  # nothing to warn about
    p = normlab("train", "--out", tmp_path / "c", "--config", "../configs/tiny.toml", *TINY,
                "--set", "train.steps=1", check=0)
    assert "| config ../configs/tiny.toml + " in p.stdout.splitlines()[1], p.stdout


def test_warnings(tmp_path):
    p = normlab("train", "--out", tmp_path / "w", *TINY, "--set", "train.steps=2",
                "--set", "optim.warmup_steps=50", check=0)
    assert ("normlab: warning: optim.warmup_steps = 50 is greater than train.steps = 2: the warmup "
            "never ends") in p.stderr, p.stderr
    cores = len(os.sched_getaffinity(0))
    p = normlab("train", "--out", tmp_path / "t", *TINY, "--set", "train.steps=2",
                "--set", f"train.threads={cores + 1}", check=0)
    assert (f"normlab: warning: train.threads = {cores + 1} is more than the {cores} cores "
            "available to this process") in p.stderr, p.stderr
    assert "warmup" not in p.stderr, p.stderr


@pytest.fixture
def run10(tmp_path):
    """A finished 10-step run with checkpoints at steps 5 and 10."""
    d = tmp_path / "run"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=10", check=0)
    assert sorted(x.name for x in (d / "checkpoints").glob("step_*")) == [
        "step_00000005", "step_00000010"]
    return d


def test_finished_run_says_how_to_extend(run10):
    before = step_records(run10)
    p = normlab("train", "--resume", run10, check=0)
    assert p.stdout.strip() == (
        f"{run10} is already complete at step 10 (train.steps = 10). To train it further: "
        f"normlab train --resume {run10} --set train.steps=N (N > 10)"), p.stdout
    assert step_records(run10) == before


def test_dump_config_on_resume(run10):
    p = normlab("train", "--resume", run10, "--dump-config", check=0)
    assert p.stdout == (run10 / "config.toml").read_text()
    assert "d_model = 32" in p.stdout and "steps = 10" in p.stdout
    p = normlab("train", "--resume", run10, "--set", "train.steps=25", "--dump-config", check=0)
    assert "steps = 25" in p.stdout and "d_model = 32" in p.stdout
    assert "steps = 10" in (run10 / "config.toml").read_text()  # only printed


def test_extend_finished_run(run10):
    p = normlab("train", "--resume", run10, "--set", "train.steps=15", "--set", "optim.lr=1e-3",
                check=0)
    assert f"resuming {run10} at step 10 of 15\n" in p.stdout, p.stdout
    assert latest(run10) == "step_00000015"
    toml = (run10 / "config.toml").read_text()
    assert "steps = 15" in toml and "lr = 0.001" in toml
    assert [r["step"] for r in step_records(run10)] == [1, 5, 10, 15]
    # A further resume uses the saved config: complete at 15.
    p = normlab("train", "--resume", run10, check=0)
    assert "already complete at step 15" in p.stdout, p.stdout


def test_refused_keys_leave_the_run_alone(run10):
    before = tree_digest(run10)
    p = normlab("train", "--resume", run10, "--set", "train.steps=20",
                "--set", "train.batch_size=8", "--set", "model.placement=post")
    assert p.returncode == 2, p.stderr
    assert ("train.batch_size cannot change on resume: it changes the batches the run draws "
            "(saved 4, given 8)") in p.stderr, p.stderr
    assert "model.placement cannot change on resume" in p.stderr, p.stderr
    p = normlab("train", "--resume", run10, "--set", "train.steps=5")
    assert p.returncode == 2 and "train.steps = 5 is below step 10" in p.stderr, p.stderr
    p = normlab("train", "--resume", run10, "--config", "../configs/tiny.toml")
    assert p.returncode == 2 and "drop --config" in p.stderr, p.stderr
    assert tree_digest(run10) == before


def test_resume_from_an_older_checkpoint_rewinds(run10):
    final = sha(run10 / "checkpoints" / "step_00000010" / "model.safetensors")
    ck = run10 / "checkpoints" / "step_00000005"
    p = normlab("train", "--resume", ck, "--rewind", check=0)
    assert (f"resuming {run10} at step 5 of 10 (rewound to {ck}: later checkpoints and metrics "
            "records removed)") in p.stdout, p.stdout
    assert latest(run10) == "step_00000010"
    assert [r["step"] for r in step_records(run10)] == [1, 5, 10]
    # Replayed from step 5 with the same config: the same weights.
    assert sha(run10 / "checkpoints" / "step_00000010" / "model.safetensors") == final
    p = normlab("train", "--resume", run10 / "nope")
    assert p.returncode == 3 and "does not exist" in p.stderr, p.stderr


def test_skipped_steps_print_their_reason(tmp_path):
    # A short spike window and a low threshold flag spikes; with the rollback policy and no
    # checkpoint before the end, every flagged step falls back to a skip.
    d = tmp_path / "spiky"
    p = normlab("train", "--out", d, *TINY, "--set", "train.steps=40",
                "--set", "train.log_interval=1",
                "--set", "train.spike_policy=rollback", "--set", "train.spike_window=2",
                "--set", "train.spike_threshold=0.5", "--set", "train.max_bad_steps=1000",
                "--set", "train.checkpoint_interval=0", "--set", "train.eval_interval=0", check=0)
    recs = {r["step"]: r for r in step_records(d)}
    lines = [l for l in p.stdout.splitlines() if l.startswith("step ")]
    assert len(lines) == 40
    fallbacks = 0
    for line in lines:
        r = recs[int(line.split()[1].split("/")[0])]
        if r["skipped"]:
            assert r["spike"] and not r["nonfinite"], r
            want = "SKIPPED (spike; no checkpoint to roll back to yet, skipped instead)"
            assert want in line, line
            fallbacks += 1
        else:
            assert "SKIPPED" not in line, line
    assert fallbacks > 0, p.stdout


def test_second_ctrl_c_exits_at_once(tmp_path):
    run = tmp_path / "run"
    # Steps of about a second (on one thread), so that the second Ctrl-C lands inside a step, and
    # a checkpoint after every step.
    exe = pathlib.Path(BUILD) / "normlab"
    p = subprocess.Popen(
        [str(exe), "train", "--out", str(run), "--set", "model.n_layer=4",
         "--set", "model.d_model=256", "--set", "model.n_head=4", "--set", "model.d_ff=1024",
         "--set", "model.seq_len=128", "--set", "train.batch_size=8", "--set", "train.threads=1",
         "--set", "train.steps=100000",
         "--set", "train.log_interval=1", "--set", "train.eval_interval=0",
         "--set", "train.checkpoint_interval=1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stdout.readline()
        assert line, "training ended early"
        if line.startswith("step      2/"):
            break
    p.send_signal(signal.SIGINT)
    # Acknowledged at once, before the step ends: then the second one.
    ack = p.stderr.readline()
    assert ack == ("normlab: stopping after this step, then saving a checkpoint (Ctrl-C again to "
                   "exit now)\n"), ack
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert err == "normlab: exiting now; the last complete checkpoint is kept\n", err
    # The last complete checkpoint is intact: it evaluates, and the run resumes from it.
    # (It names step 1 when the signal landed while step 2's checkpoint was being written.)
    stopped = int(latest(run).split("_")[1])
    assert stopped >= 1
    for d in (run / "checkpoints").iterdir():
        if d.is_dir() and not d.name.endswith((".tmp", ".trash")):
            assert (d / "model.safetensors").exists() and (d / "state.safetensors").exists(), d
    normlab("eval", "--checkpoint", run, "--batches", "1", check=0)
    r = normlab("train", "--resume", run, "--set", f"train.steps={stopped + 1}", check=0)
    assert f"resuming {run} at step {stopped} of {stopped + 1}" in r.stdout, r.stdout
    assert latest(run) == f"step_{stopped + 1:08d}"
