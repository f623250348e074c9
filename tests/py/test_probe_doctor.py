"""`normlab doctor` on PyTorch runs recorded by normlab.torch.Probe and made unstable on purpose
names the same condition as on the corresponding normlab runs (docs/doctor.md's table), and finds
nothing wrong in a healthy probed run. Both sides train byte-level models on the corpus normlab
embeds (data/wordnet_glosses.txt; the probed runs name it as data.path, so doctor's unigram-plateau
check reads the same tokens for both)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import normlab_py  # noqa: F401  (imports normlab from the build tree)
from normlab_cli import normlab
from probe_fixtures import UNSTABLE, unstable_run

TINY = {"model.n_layer": 2, "model.d_model": 32, "model.n_head": 2, "model.d_ff": 64,
        "model.seq_len": 32, "train.batch_size": 4, "train.eval_interval": 0,
        "train.log_interval": 1, "train.threads": 1, "diag.per_head": "true"}
CASES = UNSTABLE  # condition -> (normlab --set overrides, the PyTorch model, the kind or None)


def _doctor(run: Path) -> dict:
    return json.loads(normlab("doctor", run, "--json", check=0).stdout)


def _problems(d: dict) -> list[str]:
    return [f["kind"] for f in d["findings"] if f["severity"] == "problem"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_doctor_names_the_same_condition_on_probed_and_normlab_runs(case, tmp_path):
    sets, _, kind = CASES[case]
    args = [x for k, v in {**TINY, **sets}.items() for x in ("--set", f"{k}={v}")]
    normlab("train", "--out", tmp_path / "normlab", *args, timeout=600)
    unstable_run(case, tmp_path / "probed")
    ours, theirs = _doctor(tmp_path / "normlab"), _doctor(tmp_path / "probed")
    print(f"\n{case}: normlab run: {ours['verdict']}\n{case}: probed run:  {theirs['verdict']}")
    assert theirs["unigram_entropy"] == pytest.approx(ours["unigram_entropy"])
    assert theirs["finished"] and theirs["diagnostics"]["records"] > 0
    if kind is None:
        assert ours["healthy"], ours["verdict"]
        assert theirs["healthy"], theirs["verdict"]
    else:
        assert kind in _problems(ours), ours["verdict"]
        assert kind in _problems(theirs), theirs["verdict"]
