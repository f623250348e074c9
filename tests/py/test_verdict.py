"""One verdict per run (issue #42): `train` judges its run by the divergence rule of `sweep` and
`compare` (ends "diverged", says why, exits 5), and so does `normlab.train`; `doctor` leads a
diverged run with a `diverged` finding whose first remedy is the learning rate (from the run's
sweep, else a tenfold cut); an interrupted run is judged on the steps it reached, never given a
clean bill; `train.steps = 0` is refused like any other out-of-range value."""
import json
import pathlib
import signal
import subprocess
import time

from normlab_cli import BUILD, normlab

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_batches=1", "--set", "train.log_interval=5", "--set", "train.threads=1"]
# lr 3 without warmup or clipping: the loss blows up to tens of nats and stays there (finite, so
# the guards let it through); the divergence rule stops it after 50 steps above the initial loss.
BLOW_UP = ["--set", "optim.lr=3", "--set", "optim.grad_clip=0", "--set", "optim.warmup_steps=0"]


def end_event(run):
    lines = (pathlib.Path(run) / "metrics.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def test_train_ends_diverged_says_why_and_exits_5(tmp_path):
    run = tmp_path / "r"
    p = normlab("train", "--out", run, *TINY, *BLOW_UP, "--set", "train.steps=150", check=5)
    end = end_event(run)
    assert end["event"] == "end" and end["reason"] == "diverged", end
    assert "above the initial loss" in end["detail"], end
    assert 50 < end["step"] < 150, end  # stopped early, as a sweep stops it
    line = [l for l in p.stderr.splitlines() if l.startswith("normlab: diverged")]
    assert line == [f"normlab: diverged at step {end['step']} of 150 (stopped early): {end['detail']}"], p.stderr
    assert f"normlab doctor {run}" in p.stderr, p.stderr
    assert "done:" not in p.stdout, p.stdout
    # doctor leads with it, and its first remedy is the learning rate (no sweep: a tenfold cut).
    d = json.loads(normlab("doctor", run, "--json", check=0).stdout)
    first = d["findings"][0]
    assert first["kind"] == "diverged" and first["severity"] == "problem", d["findings"]
    assert first["remedies"][0]["text"].startswith("lower optim.lr to 0.3 (--set optim.lr=0.3): a tenfold cut"), first
    assert first["remedies"][0]["set"] == {"optim.lr": "0.3"}, first
    assert d["healthy"] is False and d["verdict"].split(": ", 1)[1].startswith("diverged"), d["verdict"]
    text = normlab("doctor", run, check=0).stdout
    problems = [l for l in text.splitlines() if l.startswith("PROBLEM ")]
    assert problems[0].startswith(f"PROBLEM diverged at step {end['step']} of 150"), text


def test_a_short_run_that_has_not_learned_yet_is_done(tmp_path):
    # 3 steps inside a 100-step warmup: its loss is within noise of the initial loss, not diverged.
    run = tmp_path / "short"
    normlab("train", "--out", run, *TINY, "--set", "train.steps=3", "--set", "train.eval_interval=3",
            check=0)
    assert end_event(run)["reason"] == "done"


def test_python_train_uses_the_same_rule(tmp_path):
    from normlab_py import normlab as nl  # the package from the build tree
    cfg = {"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64, "seq_len": 32},
           "optim": {"lr": 3, "grad_clip": 0, "warmup_steps": 0},
           "train": {"steps": 150, "batch_size": 4, "eval_batches": 1, "log_interval": 5,
                     "threads": 1}}
    run = nl.train(cfg, out=tmp_path / "py", progress=False)
    assert run.status == "diverged", run.result
    assert run.result["diverged"] and "above the initial loss" in run.result["stop_reason"]
    assert run.result["stop_step"] < 150


def test_doctor_takes_the_learning_rate_from_the_sweep(tmp_path):
    out = tmp_path / "sw"
    normlab("sweep", *TINY, *BLOW_UP[2:], "--set", "train.steps=60",
            "--grid", "optim.lr=1e-3,1e-2,3", "--out", out, check=0)
    status = {r["name"]: r["status"] for r in json.loads((out / "sweep.json").read_text())["runs"]}
    assert status == {"lr-1e-3": "done", "lr-1e-2": "done", "lr-3": "diverged"}, status
    d = json.loads(normlab("doctor", out / "lr-3", "--json", check=0).stdout)
    first = d["findings"][0]
    assert first["kind"] == "diverged"
    assert first["remedies"][0]["text"].startswith(
        "lower optim.lr to 0.01 (--set optim.lr=0.01): the largest learning rate that did not "
        "diverge among this sweep's runs of the same variant (lr-1e-2"), first["remedies"]


def interrupt_after(args, metrics, step):
    """Starts `normlab ARGS` and sends SIGINT once metrics.jsonl has logged `step`."""
    p = subprocess.Popen([str(pathlib.Path(BUILD) / "normlab"), *map(str, args)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if metrics.exists() and f'"step":{step},' in metrics.read_text():
            break
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, out + err
    return out, err


def test_doctor_judges_an_interrupted_run_on_its_steps(tmp_path):
    run = tmp_path / "int"
    interrupt_after(["train", "--out", run, *TINY, "--set", "train.steps=100000",
                     "--set", "train.eval_interval=0", "--set", "train.log_interval=1"],
                    run / "metrics.jsonl", 12)
    end = end_event(run)
    assert end["reason"] == "interrupted"
    s = end["step"]
    d = json.loads(normlab("doctor", run, "--json", check=0).stdout)
    assert d["healthy"] is False and d["finished"] is False
    assert d["verdict"].startswith(f"interrupted at step {s} of 100000: judged on {s} steps"), d["verdict"]
    assert "healthy" not in d["verdict"]
    text = normlab("doctor", run, check=0).stdout
    assert text.rstrip().splitlines()[-1].startswith(f"verdict: interrupted at step {s} of 100000")


def test_steps_zero_is_refused(tmp_path):
    p = normlab("train", "--out", tmp_path / "z", *TINY, "--set", "train.steps=0", check=2)
    assert "train.steps = 0 must be >= 1" in p.stderr, p.stderr
    assert not (tmp_path / "z" / "metrics.jsonl").exists()


def test_an_interrupted_compare_prints_the_interrupted_verdict(tmp_path):
    out = tmp_path / "cmp"
    stdout, _ = interrupt_after(["compare", *TINY, "--set", "train.steps=100000",
                                 "--set", "train.eval_interval=0", "--set", "train.log_interval=1",
                                 "--placements", "post,pre", "--out", out],
                                out / "post" / "metrics.jsonl", 12)
    s = end_event(out / "post")["step"]
    verdicts = [l for l in stdout.splitlines() if l.startswith("  post: ")]
    assert verdicts == [f"  post: interrupted at step {s} of 100000: judged on {s} steps: "
                        "no instability found so far (diagnostics off, some signals unchecked)"] \
        or (len(verdicts) == 1 and verdicts[0].startswith(
            f"  post: interrupted at step {s} of 100000: judged on {s} steps: ")), stdout
    assert "healthy" not in stdout, stdout
