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
        for m in f["remedies"]:
            assert set(m) == {"text", "set", "tried"} and isinstance(m["set"], dict)
    attn = next(f for f in d["findings"] if f["kind"] == "attention_logit_growth")
    assert {"model.qk_norm": "rmsnorm"} in [m["set"] for m in attn["remedies"]]
    st = attn["values"]["statistic"]
    assert st["name"] == "attn_max_logit" and st["threshold"] == 200 and st["value"] >= 200
    assert d["checked"] and isinstance(d["not_checked"], list)


def _as_probed_run(src, dst):
    """A copy of a real normlab run as a compiled probed run would have written it: a torch
    [source], forward statistics null from step 5 on and the probe's `missing` event."""
    import shutil
    shutil.copytree(src, dst)
    reason = ("forward statistics missing from step 5 on: the model was compiled after the probe "
              "attached (torch.compile)")
    fields = ["attn_max_logit", "attn_entropy", "attn_max_logit_head", "resid_rms", "resid_max",
              "log_z_mean", "max_logit_raw"]
    out = []
    for line in (dst / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r.get("step") == 5 and "event" not in r:
            out.append(json.dumps({"event": "missing", "step": 5, "fields": fields,
                                   "reason": reason}))
        if "event" not in r and r.get("step", 0) >= 5:
            for k in fields:
                if k in r:
                    r[k] = None
        out.append(json.dumps(r))
    (dst / "metrics.jsonl").write_text("\n".join(out) + "\n")
    cfg = (dst / "config.toml").read_text()
    (dst / "config.toml").write_text(cfg + '\n[source]\nkind = "torch"\ntrainer = "loop"\n'
                                     'unknown = ["optim.warmup_steps"]\n')
    return reason


def test_statistics_lost_from_step_5_are_not_checked_and_not_judged(tmp_path):
    run = tmp_path / "healthy"
    normlab("train", "--out", run, *TINY, "--set", "train.steps=20", "--set", "optim.lr=3e-3",
            "--set", "diag.interval=1", check=0)
    reason = _as_probed_run(run, tmp_path / "probed")
    p = normlab("doctor", tmp_path / "probed", check=0)
    assert "source: a PyTorch run (loop; unknown, so not relied on: optim.warmup_steps)" in p.stdout
    assert "not checked:" in p.stdout, p.stdout
    assert f"  - attention-logit growth (needs attn_max_logit): {reason}" in p.stdout, p.stdout
    verdict = p.stdout.rstrip().splitlines()[-1]
    assert verdict.startswith("verdict: not judged: ") and "healthy" not in verdict, verdict
    d = json.loads(normlab("doctor", tmp_path / "probed", "--json", check=0).stdout)
    assert d["healthy"] is False
    assert d["config"]["warmup_steps"] is None and d["config"]["lr"] == 3e-3
    assert d["source"] == {"kind": "torch", "trainer": "loop", "unknown": ["optim.warmup_steps"]}
    lost = {n["check"]: n for n in d["not_checked"]}
    assert set(lost) >= {"attention-logit growth", "residual-stream growth",
                         "output-logit divergence"}, d["not_checked"]
    assert all(n["reason"] == reason and n["evidence_lost"] for n in lost.values())
    # The run it came from, with every statistic: judged (no evidence lost).
    d0 = json.loads(normlab("doctor", run, "--json", check=0).stdout)
    assert not d0["not_checked"] and not d0["verdict"].startswith("not judged"), d0["verdict"]


def test_a_remedy_the_run_has_is_not_advised_again(tmp_path):
    # The failing run with Gemma 2's attention soft-cap already on: the logits before the cap
    # still grow, and doctor advises QK-Norm, not the soft-cap again.
    run = tmp_path / "capped"
    normlab("train", "--out", run, *TINY, *FAILING, "--set", "model.attn_softcap=50",
            "--set", "diag.interval=5", check=0)
    d = json.loads(normlab("doctor", run, "--json", check=0).stdout)
    attn = next(f for f in d["findings"] if f["kind"] == "attention_logit_growth")
    cap = [m for m in attn["remedies"] if "model.attn_softcap" in m["set"]]
    assert len(cap) == 1 and cap[0]["tried"] and cap[0]["set"] == {"model.attn_softcap": "50"}
    assert "the run already has it" in cap[0]["text"], cap[0]
    assert any(m["set"] == {"model.qk_norm": "rmsnorm"} and not m["tried"]
               for m in attn["remedies"])
    text = normlab("doctor", run, check=0).stdout
    assert "--set model.attn_softcap" not in text, text
    assert "already tried: model.attn_softcap = 50: the run already has it" in text, text


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
