"""normlab.sweep(seeds=N): the same runs and sweep.json as `normlab sweep --seeds N`, in worker
processes too, and a seed count below 1 refused."""
import json

import pytest
from normlab_cli import normlab as cli
from normlab_py import TINY_RUN, TINY_RUN_SETS, normlab


def test_sweep_seeds_matches_the_cli(tmp_path):
    grid = {"optim.lr": [1e-3, 1e-2]}
    sets = TINY_RUN_SETS + ["--set=train.steps=3", "--set=train.eval_interval=3"]
    cli("sweep", "--grid", "optim.lr=0.001,0.01", "--seeds", "2", "--out", tmp_path / "cli", *sets,
        check=0)
    want = json.loads((tmp_path / "cli" / "sweep.json").read_text())
    cfg = normlab.Config(TINY_RUN).update({"train.steps": 3, "train.eval_interval": 3})
    got = normlab.sweep(cfg, grid, out=tmp_path / "py", seeds=2)
    assert dict(got) == want
    assert got["seeds"] == 2 and [r["seed"] for r in got["runs"]] == [0, 1, 0, 1]
    assert (tmp_path / "py" / "lr-0.001_seed1" / "metrics.jsonl").exists()
    assert " ± " in got.table
    par = normlab.sweep(cfg, grid, out=tmp_path / "par", jobs=2, seeds=2)
    assert [r["final_loss"] for r in par["runs"]] == [r["final_loss"] for r in want["runs"]]
    # seeds=1 (the default) is the single-seed sweep.
    one = normlab.sweep(cfg, grid, out=tmp_path / "one", seeds=1)
    assert "seeds" not in one and [r["final_loss"] for r in one["runs"]] == [
        r["final_loss"] for r in want["runs"] if r["seed"] == 0]
    with pytest.raises(normlab.ConfigError, match="seeds"):
        normlab.sweep(cfg, grid, out=tmp_path / "bad", seeds=0)
