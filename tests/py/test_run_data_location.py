"""A run remembers where its data is (issue 50): a new run records data.path absolute and, as
data.path_from_run, relative to its run directory, so that eval, train --resume and doctor work
from another directory, and from a run moved together with its data; when the data is in neither
place the error says where the run was trained and how to point at the data (--data), and the
printed fix runs."""
import json
import random
import shutil
import tomllib

from normlab_cli import normlab

TINY = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.eval_interval=0", "--set", "train.checkpoint_interval=2",
        "--set", "train.log_interval=2", "--set", "optim.warmup_steps=0",
        "--set", "train.threads=1", "--set", "train.steps=2", "--set", "diag.interval=1"]


def corpus(path):
    rng = random.Random(1)
    words = ["norm", "layer", "residual", "gate", "head", "width", "scale", "token"]
    path.write_text(" ".join(rng.choice(words) for _ in range(3000)) + "\n")


def data_of(run):
    return tomllib.loads((run / "config.toml").read_text())["data"]


def test_a_run_finds_its_data_from_anywhere(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    corpus(home / "corpus.txt")
    normlab("train", "--out", "runs/r", *TINY, "--set", "data.path=corpus.txt", cwd=home, check=0)
    run = home / "runs" / "r"
    d = data_of(run)
    assert d["path"] == str(home / "corpus.txt")  # absolute
    assert d["path_from_run"] == "../../corpus.txt"
    # From another directory: eval, resume and doctor (whose plateau check reads the data).
    normlab("eval", "--checkpoint", run, cwd=elsewhere, check=0)
    normlab("train", "--resume", run, "--set", "train.steps=4", cwd=elsewhere, check=0)
    doc = normlab("doctor", run, "--json", cwd=elsewhere, check=0)
    rep = json.loads(doc.stdout)
    assert "unigram plateau" in rep["checked"], doc.stdout
    assert not any("unigram plateau" in json.dumps(e) for e in rep["not_checked"]), doc.stdout
    assert rep["unigram_entropy"] is not None, doc.stdout
    # The run moved together with its data: found from the run directory.
    moved = tmp_path / "moved"
    shutil.move(home, moved)
    run = moved / "runs" / "r"
    normlab("eval", "--checkpoint", run, cwd=elsewhere, check=0)
    # The data gone from both places: the message says where the run was trained and how to
    # point at the data, and the command it prints runs.
    (moved / "corpus.txt").rename(moved / "corpus_renamed.txt")
    for args in (["eval", "--checkpoint", run], ["train", "--resume", run,
                                                  "--set", "train.steps=6"]):
        p = normlab(*args, cwd=elsewhere)
        assert p.returncode != 0
        err = p.stderr
        assert f"was trained on {home / 'corpus.txt'}" in err, err
        assert str(run / "../../corpus.txt") in err or "data.path_from_run" in err, err
        assert f"normlab train --resume {run} --data PATH" in err, err
        assert f"normlab eval --checkpoint {run} --data PATH" in err, err
    new = moved / "corpus_renamed.txt"
    normlab("train", "--resume", run, "--set", "train.steps=6", "--data", new, cwd=elsewhere,
            check=0)
    normlab("eval", "--checkpoint", run, "--data", new, cwd=elsewhere, check=0)
    # --data is for a resumed run; a new one takes data.path.
    p = normlab("train", "--out", tmp_path / "x", *TINY, "--data", new, cwd=elsewhere, check=2)
    assert "--data goes with --resume" in p.stderr
