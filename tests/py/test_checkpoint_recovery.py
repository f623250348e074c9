"""Checkpoints that point the way out: a damaged (truncated) checkpoint is named as such by `eval`,
`generate` and `train --resume`, with the expected and found sizes, the run's intact checkpoints
and the command that uses one; `--resume RUN` passes over it to the newest intact checkpoint and
says so; a named damaged checkpoint is refused; a missing step lists the steps there are; an older
step is rewound to only with --rewind; a model change refused on resume points to --init-from."""
import json
import shlex
import shutil
import struct

import pytest
from normlab_cli import normlab
from test_cli import TINY, tree_digest


def step_name(step):
    return f"step_{step:08d}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 20-step run with checkpoints every 5 steps, the newest 3 kept: 10, 15, 20."""
    d = tmp_path_factory.mktemp("recovery") / "run"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=20",
            "--set", "train.keep_checkpoints=3", check=0)
    assert sorted(p.name for p in (d / "checkpoints").glob("step_*")) == [
        step_name(10), step_name(15), step_name(20)]
    return d


@pytest.fixture
def run(trained, tmp_path):
    d = tmp_path / "run"
    shutil.copytree(trained, d)
    return d


def expected_size(path):
    """8 + header length + the largest data offset: the size the safetensors header promises."""
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    return 8 + n + max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")


def truncate(run, step, name="model.safetensors", cut=1000):
    """Cuts `cut` bytes off the checkpoint's file; returns (expected, found) sizes."""
    f = run / "checkpoints" / step_name(step) / name
    data = f.read_bytes()
    assert expected_size(f) == len(data)
    f.write_bytes(data[:-cut])
    return len(data), len(data) - cut


def ck(run, step):
    return run / "checkpoints" / step_name(step)


def steps_of(run):
    return [json.loads(l)["step"] for l in (run / "metrics.jsonl").read_text().splitlines()
            if "event" not in json.loads(l)]


def test_eval_and_generate_name_the_damaged_checkpoint_and_the_way_out(run):
    want, found = truncate(run, 20)
    damaged = (f"normlab: checkpoint {ck(run, 20)} is damaged: model.safetensors is truncated "
               f"(expected {want} bytes, found {found})")
    intact = f"intact checkpoints of the run {run} (newest first): {step_name(15)}, {step_name(10)}"
    for cmd, extra in [("eval", ["--batches", "1"]),
                       ("generate", ["--prompt-ids", "1,2", "--max-new-tokens", "2"]),
                       ("generate", ["--prompt", "the cat's", "--max-new-tokens", "2"])]:
        p = normlab(cmd, "--checkpoint", run, *extra)
        assert p.returncode == 3, p.stderr
        lines = p.stderr.strip().splitlines()
        # The hint repeats the user's other arguments (issue 50), so the printed command runs.
        assert lines[:2] == [damaged, intact], p.stderr
        head = "use the newest intact one: "
        assert lines[2].startswith(head), p.stderr
        # as a shell reads it back: the user's arguments with the intact checkpoint
        use = shlex.split(lines[2][len(head):])
        assert use == ["normlab", cmd, "--checkpoint", str(ck(run, 15)), *extra], p.stderr
        normlab(*use[1:], check=0)
    # Eval and generate read the weights only: a truncated state.safetensors does not stop them.
    truncate(run, 15, "state.safetensors")
    normlab("eval", "--checkpoint", ck(run, 15), "--batches", "1", check=0)


def test_resume_names_a_damaged_checkpoint_and_never_substitutes_it(run):
    want, found = truncate(run, 20, "state.safetensors", cut=7)
    before = tree_digest(run)
    p = normlab("train", "--resume", ck(run, 20))
    assert p.returncode == 3, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"normlab: checkpoint {ck(run, 20)} is damaged: state.safetensors is truncated "
        f"(expected {want} bytes, found {found})",
        f"intact checkpoints of the run {run} (newest first): {step_name(15)}, {step_name(10)}",
        f"use the newest intact one: normlab train --resume {ck(run, 15)}"], p.stderr
    assert tree_digest(run) == before


def test_resume_of_the_run_passes_over_the_damaged_checkpoint(run):
    want, found = truncate(run, 20)
    p = normlab("train", "--resume", run, check=0)
    assert (f"normlab: checkpoint {ck(run, 20)} is damaged: model.safetensors is truncated "
            f"(expected {want} bytes, found {found}); resuming from {ck(run, 15)}, the newest "
            f"intact checkpoint (the damaged one is kept as {ck(run, 20)}.damaged)") in p.stderr, \
        p.stderr
    assert f"resuming {run} at step 15 of 20" in p.stdout, p.stdout
    # Kept aside for inspection, and not counted as a checkpoint; the run wrote step 20 anew.
    damaged = run / "checkpoints" / (step_name(20) + ".damaged")
    assert damaged.is_dir() and (damaged / "model.safetensors").stat().st_size == found
    assert (run / "checkpoints" / "latest").read_text().strip() == step_name(20)
    assert expected_size(ck(run, 20) / "model.safetensors") == want
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == [
        step_name(10), step_name(15), step_name(20), step_name(20) + ".damaged"]
    assert steps_of(run) == [1, 5, 10, 15, 20]
    normlab("eval", "--checkpoint", run, "--batches", "1", check=0)


def test_a_missing_step_lists_the_steps_there_are(run):
    truncate(run, 20)
    p = normlab("train", "--resume", ck(run, 5))
    assert p.returncode == 3, p.stderr
    assert (f"{ck(run, 5)} does not exist; the run's checkpoints ({run / 'checkpoints'}): "
            f"{step_name(10)}, {step_name(15)}, {step_name(20)} (damaged) "
            "(train.keep_checkpoints removes the oldest ones)") in p.stderr, p.stderr
    p = normlab("eval", "--checkpoint", ck(run, 12))
    assert p.returncode == 3, p.stderr
    assert (f"{ck(run, 12)} does not exist; the run's checkpoints ({run / 'checkpoints'}): "
            f"{step_name(10)}, {step_name(15)}, {step_name(20)} (damaged)\n") in p.stderr, p.stderr


def test_resuming_an_older_step_needs_rewind(run):
    before = tree_digest(run)
    p = normlab("train", "--resume", ck(run, 10))
    assert p.returncode == 3, p.stderr
    assert (f"resuming from {ck(run, 10)} would rewind the run {run}: it would delete the later "
            f"checkpoints {step_name(15)}, {step_name(20)} and the metrics records after step 10. "
            "To rewind, pass --rewind") in p.stderr, p.stderr
    assert tree_digest(run) == before
    p = normlab("train", "--rewind", "--out", run.parent / "new", *TINY)
    assert p.returncode == 2 and "--rewind goes with --resume" in p.stderr, p.stderr
    final = (ck(run, 20) / "model.safetensors").read_bytes()
    p = normlab("train", "--resume", ck(run, 10), "--rewind", check=0)
    assert f"resuming {run} at step 10 of 20 (rewound to {ck(run, 10)}" in p.stdout, p.stdout
    assert steps_of(run) == [1, 5, 10, 15, 20]
    assert (ck(run, 20) / "model.safetensors").read_bytes() == final  # replayed exactly


def test_a_model_change_on_resume_points_to_init_from(run, tmp_path):
    before = tree_digest(run)
    p = normlab("train", "--resume", run, "--set", "model.qk_norm=rmsnorm",
                "--set", "train.steps=30")
    assert p.returncode == 2, p.stderr
    assert "model.qk_norm cannot change on resume" in p.stderr, p.stderr
    hint = (f"to retrofit it onto the trained weights, start a new run with --init-from {run} "
            "--set model.qk_norm=rmsnorm --out NEW_RUN")
    assert hint in p.stderr, p.stderr
    assert tree_digest(run) == before
    # A key that is not the model's gets no such hint.
    p = normlab("train", "--resume", run, "--set", "train.batch_size=8")
    assert p.returncode == 2 and "retrofit" not in p.stderr, p.stderr
    # The command it names works.
    new = tmp_path / "retrofit"
    p = normlab("train", "--init-from", run, "--set", "model.qk_norm=rmsnorm", "--out", new,
                "--set", "train.steps=1", "--set", "train.threads=1", check=0)
    assert "4 new (initialised): blocks.0.attn.q_norm.weight" in p.stdout, p.stdout


def test_python_train_resume_passes_over_and_needs_rewind(run):
    from normlab_py import normlab as nl
    truncate(run, 20)
    with pytest.warns(nl.NormlabWarning, match=rf"checkpoint .*{step_name(20)} is damaged: "
                                               r"model.safetensors is truncated"):
        r = nl.train(None, run, resume=True, progress=False)
    assert r.result["steps"] == 20
    with pytest.raises(nl.InputError, match="would rewind the run"):
        nl.train(None, ck(run, 10), resume=True, progress=False)
    r = nl.train(None, ck(run, 10), resume=True, progress=False, rewind=True)
    assert r.result["steps"] == 20
    assert [c.name for c in r.checkpoints] == [step_name(10), step_name(15), step_name(20)]
