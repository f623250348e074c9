"""How runs and studies end, from the command line: `train`'s done line names its numbers, `sweep
--help` states the divergence rule, a sweep without a learning-rate grid prints no sensitivity, an
interrupted sweep or compare writes no summary from unfinished runs (no nan, inf or 0.0000), and a
rerun says which runs it resumes and which are finished."""
import json
import pathlib
import signal
import subprocess
import time

from normlab_cli import BUILD, normlab

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_batches=1", "--set", "train.log_interval=5", "--set", "train.threads=1",
        "--set", "optim.warmup_steps=2"]


def interrupted(args, started, wait=0.3):
    """Starts `normlab ARGS`, sends SIGINT once the file `started` has a line, returns the process
    result (stdout, stderr, exit code)."""
    p = subprocess.Popen([str(pathlib.Path(BUILD) / "normlab"), *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if started.exists() and started.read_text().strip():
            break
        time.sleep(0.02)
    time.sleep(wait)
    assert p.poll() is None, "finished before it could be interrupted: " + p.stdout.read()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    return out, err, p.returncode


def test_done_line_names_its_numbers(tmp_path):
    p = normlab("train", "--out", tmp_path / "r", *TINY, "--set", "train.steps=30",
                "--set", "train.eval_interval=30", check=0)
    done = [l for l in p.stdout.splitlines() if l.startswith("done:")]
    assert len(done) == 1, p.stdout
    assert "train loss (last 20 steps) " in done[0] and ", val loss " in done[0], done[0]
    assert "tokens/s (run average)" in done[0], done[0]
    end = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[-1])
    assert end["event"] == "end" and end["reason"] == "done" and end["step"] == 30
    assert f"train loss (last 20 steps) {end['train_loss']:.4f}" in done[0]
    assert f"{end['tokens_per_s']:.0f} tokens/s" in done[0]


def test_sweep_help_states_the_divergence_rule():
    p = normlab("sweep", "--help", check=0)
    text = " ".join(p.stdout.split())
    for phrase in ("Divergence:", "half-life 10 steps", "max(50, 10% of train.steps)",
                   "not below the initial loss", "max_bad_steps", "final val loss"):
        assert phrase in text, phrase


def test_sweep_without_lr_grid_prints_no_sensitivity(tmp_path):
    out = tmp_path / "sw"
    p = normlab("sweep", *TINY, "--set", "train.steps=10", "--set", "train.eval_interval=10",
                "--grid", "model.placement=post,pre", "--out", out, check=0)
    assert "No learning-rate grid (optim.lr): no learning-rate sensitivity." in p.stdout, p.stdout
    assert "nan" not in p.stdout and "LR sensitivity" not in p.stdout, p.stdout
    j = json.loads((out / "sweep.json").read_text())
    assert j["sensitivity"] == [] and len(j["runs"]) == 2
    assert all(r["status"] == "done" and r["steps"] == 10 for r in j["runs"])


def test_interrupted_sweep_writes_no_summary_and_a_rerun_says_what_it_resumes(tmp_path):
    out = tmp_path / "sw"
    args = ["sweep", *TINY, "--set", "train.steps=20000", "--set", "train.eval_interval=0",
            "--grid", "optim.lr=1e-3,2e-3", "--out", out]
    first = out / "lr-1e-3"
    stdout, stderr, rc = interrupted(args, first / "metrics.jsonl")
    assert rc == 130, stdout + stderr
    assert "nan" not in stdout and "inf" not in stdout, stdout
    assert "sweep incomplete: 2 of 2 runs unfinished: lr-1e-3 (at step" in stdout, stdout
    assert "lr-2e-3 (not started)" in stdout and "No summary written" in stdout, stdout
    assert not (out / "sweep.json").exists() and not (out / "sensitivity.md").exists()
    at = json.loads((first / "metrics.jsonl").read_text().splitlines()[-1])
    assert at["event"] == "end" and at["reason"] == "interrupted"
    # The rerun names the run it resumes, and where (interrupted again, as soon as it trains).
    stdout, stderr, rc = interrupted(args, first / "checkpoints" / "latest", wait=1.0)
    assert f"resuming: lr-1e-3 (at step {at['step']})" in stdout, stdout
    assert f"[lr-1e-3] resuming at step {at['step']}" in stdout, stdout
    assert rc == 130 and not (out / "sweep.json").exists()


def test_rerun_of_a_finished_sweep_says_so(tmp_path):
    out = tmp_path / "sw"
    args = ["sweep", *TINY, "--set", "train.steps=10", "--set", "train.eval_interval=10",
            "--grid", "optim.lr=1e-3,300", "--out", out]
    p = normlab(*args, check=0)
    assert "LR sensitivity (final val loss)" in p.stdout, p.stdout
    # The tables (the progress lines before them show the diverging run's steps as they were).
    tables = p.stdout[p.stdout.index("| run |"):]
    assert "nan" not in tables and "inf" not in tables, p.stdout
    p2 = normlab(*args, check=0)
    assert "already finished: lr-1e-3, lr-300" in p2.stdout, p2.stdout
    assert "[lr-1e-3] already finished (done), skipped" in p2.stdout, p2.stdout


def test_interrupted_compare_prints_no_zero_val_loss(tmp_path):
    out = tmp_path / "cmp"
    args = ["compare", *TINY, "--set", "train.steps=20000", "--set", "train.eval_interval=0",
            "--placements", "post,pre", "--out", out]
    stdout, stderr, rc = interrupted(args, out / "post" / "metrics.jsonl")
    assert rc == 130, stdout + stderr
    table = [l for l in stdout.splitlines() if l.startswith("| post")]
    assert len(table) == 1 and table[0].startswith("| post | interrupted |"), stdout
    assert "0.0000" not in table[0] and "nan" not in stdout, stdout
    assert "compare incomplete: post interrupted at step" in stdout, stdout
    assert not (out / "summary.json").exists() and not (out / "summary.md").exists()
    stdout, stderr, rc = interrupted(args, out / "post" / "checkpoints" / "latest", wait=1.0)
    assert "-> " + str(out / "post") + ", resuming at step" in stdout, stdout
