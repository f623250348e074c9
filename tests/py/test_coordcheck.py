"""The coordinate check (#38) from the command line and from Python, on tiny settings: the files
it writes, --json, the report that shows it, a bad width refused by name, and that the Python
function returns the CLI's numbers."""
import json

import pytest
from normlab_cli import normlab as run_normlab
from normlab_py import normlab as nl

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.threads=1", "--set", "optim.lr=1e-2"]
ACTIVATIONS = ["embedding", "attn_out", "mlp_out", "residual", "logits", "attn_max_logit"]


def test_cli_writes_table_json_svg_and_report(tmp_path):
    out = tmp_path / "cc"
    p = run_normlab("coordcheck", *TINY, "--widths", "32,64,128", "--steps", "3", "--seeds", "1",
                    "--out", out, check=0)
    assert "| mup | logits |" in p.stdout and "| standard | residual |" in p.stdout
    j = json.loads((out / "coordcheck.json").read_text())
    assert j["activations"] == ACTIVATIONS
    assert [(c["parametrization"], c["width"]) for c in j["curves"]] == [
        ("standard", 32), ("standard", 64), ("standard", 128), ("mup", 32), ("mup", 64), ("mup", 128)]
    assert all(len(c["rms"][a]) == 4 for c in j["curves"] for a in ACTIVATIONS)  # steps 0..3
    # μP at its base width (the first) is the standard model: the same numbers at d 32.
    assert j["curves"][0]["rms"] == j["curves"][3]["rms"]
    assert j["slopes"]["standard"]["residual"][-1] > 0.5
    assert abs(j["slopes"]["mup"]["residual"][-1]) < 0.4
    assert (out / "coordcheck.md").read_text().startswith("| parametrization | activation |")
    assert "<svg" in (out / "coordcheck.svg").read_text()
    rep = tmp_path / "report.html"
    run_normlab("report", out, "--out", rep, check=0)
    html = rep.read_text()
    assert "Coordinate check" in html and "<table class=\"coordcheck\">" in html
    js = run_normlab("coordcheck", *TINY, "--widths", "32,64", "--steps", "1", "--seeds", "1",
                     "--parametrizations", "mup", "--json", "--out", tmp_path / "cc2", check=0)
    assert json.loads(js.stdout)["settings"]["parametrizations"] == ["mup"]


def test_cli_refuses_a_width_that_does_not_scale(tmp_path):
    p = run_normlab("coordcheck", *TINY, "--widths", "32,33", "--steps", "1", "--out", tmp_path,
                    check=2)
    assert "width 33" in p.stderr and "model.n_head" in p.stderr, p.stderr


def test_python_returns_the_clis_numbers(tmp_path):
    cfg = nl.Config({"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64, "seq_len": 32},
                     "train": {"batch_size": 4, "threads": 1}, "optim": {"lr": 1e-2}})
    j = nl.coordcheck(cfg, widths=[64, 32], steps=2, seeds=1, out=tmp_path / "py")
    assert j["settings"]["widths"] == [32, 64]
    cli = run_normlab("coordcheck", *TINY, "--widths", "32,64", "--steps", "2", "--seeds", "1",
                      "--json", "--out", tmp_path / "cli", check=0)
    assert json.loads(cli.stdout)["curves"] == j["curves"]
    assert (tmp_path / "py" / "coordcheck.svg").exists()
    with pytest.raises(nl.ConfigError, match="parametrizations"):
        nl.coordcheck(cfg, widths=[32, 64], parametrizations=["sp"])


def test_mup_trains_from_python_and_resumes_bitwise(tmp_path):
    """A μP run from Python: trains, keeps its parametrization in the run's config, and resumes
    to the same loss as the uninterrupted run."""
    model = {"n_layer": 2, "d_model": 64, "n_head": 2, "d_ff": 128, "seq_len": 32,
             "parametrization": "mup", "mup_base_width": 32}
    base = {"model": model, "train": {"batch_size": 4, "threads": 1, "steps": 6, "log_interval": 1,
                                      "eval_interval": 0, "checkpoint_interval": 3},
            "optim": {"lr": 1e-2, "warmup_steps": 2, "name": "muon"}}
    full = nl.train(nl.Config(base), out=tmp_path / "full")
    stop = nl.train(nl.Config(base), out=tmp_path / "part", callback=lambda r: r["step"] < 3)
    assert stop.status == "interrupted"
    part = nl.train(None, out=tmp_path / "part", resume=True)
    assert part.config["model.parametrization"] == "mup"
    assert part.records[-1]["step"] == full.records[-1]["step"] == 6
    assert part.records[-1]["loss"] == full.records[-1]["loss"]


def test_the_gate_pre_activation_is_checked_and_flat_under_mup(tmp_path):
    """Issue 50: with model.attn_gate = head and a fixed number of heads, W_g (n_head, d_model) is
    readout-like; coordcheck records the gate's pre-activation (attn_gate_logit), whose slope
    under μP stays flat with MuReadout's 1/m multiplier (without it: about +0.9 here), and ends
    with a verdict per parametrization."""
    out = tmp_path / "gate"
    p = run_normlab("coordcheck", *TINY, "--set", "model.attn_gate=head", "--set", "optim.lr=3e-3",
                    "--widths", "32,64,128", "--steps", "8", "--seeds", "1", "--out", out,
                    check=0)
    j = json.loads((out / "coordcheck.json").read_text())
    assert j["activations"] == ACTIVATIONS + ["attn_gate_logit"]
    slope = j["slopes"]["mup"]["attn_gate_logit"][-1]
    print(f"\nattn_gate_logit slope at step 8: mup {slope:+.2f}, "
          f"standard {j['slopes']['standard']['attn_gate_logit'][-1]:+.2f}")
    assert abs(slope) < 0.3, slope
    assert "| mup | attn_gate_logit |" in p.stdout
    # the verdict: one line per parametrization, naming what grows beyond the stated slope
    verdict = p.stdout.split("verdict:")[1]
    assert j["growth_slope"] == 0.25 and len(j["verdicts"]) == 2
    for v in j["verdicts"]:
        assert v in verdict
    std = next(v for v in j["verdicts"] if v.startswith("standard:"))
    assert "grow with width beyond slope 0.25" in std and "residual (+" in std, std
    mup_v = next(v for v in j["verdicts"] if v.startswith("mup:"))
    assert "attn_gate_logit" not in mup_v, mup_v
