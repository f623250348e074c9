"""`normlab doctor RUN_DIR` from the command line: the text diagnosis of a run made to fail, the
--json shape, a run without diagnostics, missing and damaged run directories (exit 3 like the
other commands), and the one-line verdicts of `sweep`. The causes themselves are tested on real
runs in tests/doctor/test_doctor.cpp."""
import json

import pytest
from normlab_cli import normlab

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_interval=0", "--set", "train.eval_batches=1",
        "--set", "train.log_interval=1", "--set", "train.threads=1"]
# Pre-Norm without QK-Norm at lr 0.3: attention logits in the thousands within 25 steps.
FAILING = ["--set", "train.steps=30", "--set", "optim.lr=0.3", "--set", "optim.warmup_steps=10"]


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("doctor") / "attn"
    normlab("train", "--out", d, *TINY, *FAILING, "--set", "diag.interval=5",
            "--set", "diag.per_head=true", check=0)
    return d


def test_text_names_the_cause_the_evidence_and_the_remedy(failing_run):
    p = normlab("doctor", failing_run, check=0)
    out = p.stdout
    assert "PROBLEM attention-logit growth" in out, out
    assert "head" in out and "step-1 value" in out, out
    assert "--set model.qk_norm=rmsnorm" in out and "to confirm:" in out, out
    assert "unigram entropy of the training tokens: 3.06" in out, out
    assert out.rstrip().splitlines()[-1].startswith("verdict: ")
    assert "attention logit growth" in out.rstrip().splitlines()[-1]


def test_json_shape(failing_run):
    p = normlab("doctor", failing_run, "--json", check=0)
    d = json.loads(p.stdout)
    for key in ("run_dir", "verdict", "healthy", "problems", "steps", "end_reason", "config",
                "initial_loss", "final_train_loss", "unigram_entropy", "diagnostics", "findings",
                "unchecked", "enable"):
        assert key in d, key
    assert d["healthy"] is False and d["problems"] >= 1 and d["steps"] == 30
    assert d["diagnostics"] == {"records": 7, "per_head": True}
    kinds = [f["kind"] for f in d["findings"]]
    assert "attention_logit_growth" in kinds
    for f in d["findings"]:
        assert set(f) == {"kind", "severity", "title", "first_step", "last_step", "evidence",
                          "remedies", "confirm", "values"}
        assert f["severity"] in ("problem", "note")
        assert f["evidence"] and f["remedies"] and f["confirm"]


def test_diagnostics_off_lists_the_unchecked_signals(tmp_path):
    d = tmp_path / "nodiag"
    normlab("train", "--out", d, *TINY, "--set", "train.steps=5", check=0)
    p = normlab("doctor", d, check=0)
    assert "diagnostics: off" in p.stdout
    assert "not checked:" in p.stdout and "attention-logit growth" in p.stdout
    assert "enable with diag.interval = " in p.stdout, p.stdout


def test_missing_and_damaged_run_dirs(tmp_path):
    p = normlab("doctor", tmp_path / "nope")
    assert p.returncode == 3 and "is not a directory" in p.stderr, p.stderr
    p = normlab("doctor", tmp_path)
    assert p.returncode == 3 and "no metrics.jsonl" in p.stderr, p.stderr
    (tmp_path / "metrics.jsonl").write_text('{"step":1,"loss":5.5}\n{"step":2,\n{"step":3}\n')
    p = normlab("doctor", tmp_path)
    assert p.returncode == 3 and "line 2" in p.stderr, p.stderr
    p = normlab("doctor")
    assert p.returncode == 2


def test_sweep_prints_a_verdict_per_run(tmp_path):
    p = normlab("sweep", *TINY, "--set", "train.steps=10", "--set", "diag.interval=5",
                "--grid", "optim.lr=1e-3,0.3", "--out", tmp_path / "s", check=0)
    assert "doctor (normlab doctor" in p.stdout, p.stdout
    lines = [l for l in p.stdout.splitlines() if l.startswith("  lr-")]
    assert len(lines) == 2 and all(": " in l for l in lines), p.stdout
