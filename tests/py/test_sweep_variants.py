"""Sweeps with seeds get the per-variant table without a learning-rate axis too (issue 50): the
final val loss and the main diagnostics over the seeds as mean ± std (min–max), the spread notes
in the output and in sweep.json, and labels that name the full key (optim.name=adamw)."""
import json

from normlab_cli import normlab

TINY = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.steps=4", "--set", "train.eval_interval=4", "--set", "train.eval_batches=1",
        "--set", "train.checkpoint_interval=0", "--set", "train.log_interval=2",
        "--set", "diag.interval=2", "--set", "optim.warmup_steps=0", "--set", "train.threads=1"]


def test_a_seeded_sweep_without_an_lr_axis_has_the_variant_table(tmp_path):
    out = tmp_path / "s"
    # QK-Clip on at a threshold these tiny runs never reach: the table says it never acted.
    p = normlab("sweep", *TINY, "--set", "optim.qk_clip=100", "--grid", "optim.name=adamw,muon",
                "--seeds", "2", "--out", out, check=0)
    j = json.loads((out / "sweep.json").read_text())
    assert [v["label"] for v in j["variants"]] == ["optim.name=adamw", "optim.name=muon"]
    for v in j["variants"]:
        assert v["seeds"] == 2 and v["diverged"] == 0
        fl = v["final_loss"]
        assert fl["n"] == 2 and fl["min"] <= fl["mean"] <= fl["max"] and fl["std"] >= 0
        assert v["max_attn_logit"]["n"] == 2
    assert isinstance(j["notes"], list)
    for v in j["variants"]:
        (g,) = v["idle_guards"]
        assert g.startswith("QK-Clip never triggered: max logit ") and g.endswith("< tau 100"), g
        assert float(g.split("max logit ")[1].split(" <")[0]) < 100
        assert f"{v['label']}: {g}." in p.stdout, p.stdout
    md = (out / "sensitivity.md").read_text()
    for text in (p.stdout, md):
        assert "| optim.name=adamw | 2 | " in text and " ± " in text, text
        assert "| variant | seeds | final val loss |" in text
    # a note exactly when the two variants are within each other's seed spread
    a, m = (v["final_loss"] for v in j["variants"])
    within = abs(a["mean"] - m["mean"]) <= max(a["std"], m["std"])
    assert any("optim.name=adamw vs optim.name=muon" in n for n in j["notes"]) == within


def test_compare_varies_any_key(tmp_path):
    """`compare --vary KEY=v1,v2` (issue 50): any key, not only placements; the table and
    summary.json label each variant KEY=value, with seeds as for placements."""
    out = tmp_path / "c"
    p = normlab("compare", *TINY, "--vary", "optim.name=adamw,muon", "--seeds", "2", "--out", out,
                check=0)
    for d in ("name-adamw", "name-adamw_seed1", "name-muon", "name-muon_seed1"):
        assert (out / d / "config.toml").exists(), d
    j = json.loads((out / "summary.json").read_text())
    assert [g["placement"] for g in j["placements"]] == ["optim.name=adamw", "optim.name=muon"]
    assert {r["variant"] for r in j["runs"]} == {"optim.name=adamw", "optim.name=muon"}
    md = (out / "summary.md").read_text()
    assert "| variant | seeds | status |" in md and "| optim.name=muon | 2 | done |" in md, md
    assert "| optim.name=adamw |" in p.stdout
    # a value the key does not take is refused before anything trains, by key and value
    p = normlab("compare", *TINY, "--vary", "optim.name=adamw,bogus", "--out", tmp_path / "d",
                check=2)
    assert "--vary optim.name=bogus" in p.stderr and not (tmp_path / "d").exists(), p.stderr
